// Exports of a live set for other tools: folded stacks (flamegraph.pl, inferno, speedscope's
// import), speedscope's own JSON file format, and CSV of the groups.
#pragma once

#include <string>

#include "query/moment_view.h"

namespace memsnap {

// One line per distinct stack, "outer;...;inner BYTES" (requested bytes), frames as
// "function (file:line)", sorted; at most `depth` innermost frames (0: all).
std::string collapsed_stacks(const Snapshot& snapshot, const MomentView& view, std::size_t depth);

// A speedscope file (https://www.speedscope.app/file-format-schema.json): one sampled profile
// in bytes, each distinct stack one sample weighted by its requested bytes.
std::string speedscope_json(const Snapshot& snapshot, const MomentView& view, std::size_t depth, const std::string& name);

// The groups as CSV with a header: key,kind,requested,bytes,blocks,percent,what.
std::string groups_csv(const MomentView& view);

}  // namespace memsnap
