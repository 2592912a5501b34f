// `memsnap dump`: the raw snapshot as JSON Lines, one record per segment, block, trace event,
// stack, settings dict or annotation, for jq and for reading a snapshot safely.
#pragma once

#include <cstdio>
#include <optional>
#include <string_view>

#include "model/snapshot.h"

namespace memsnap {

enum class DumpWhat { Segments, Blocks, Trace, Frames, Settings, Annotations };
std::optional<DumpWhat> parse_dump_what(std::string_view name);

// Returns 0, or the errno of the first write that failed (the rest is then not written).
int write_dump(const Snapshot& snapshot, DumpWhat what, std::FILE* out);

}  // namespace memsnap
