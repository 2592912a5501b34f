// `memsnap at` and `memsnap blocks` output: the live set at a moment as text or JSON
// (schema memsnap.at/1), and its allocations one per line as JSON Lines (memsnap.block/1).
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "model/load.h"
#include "query/moment_view.h"

namespace memsnap {

inline constexpr const char* kAtSchema = "memsnap.at/1";

nlohmann::ordered_json moment_json(const LoadedSnapshot& loaded, const MomentQuery& query, const MomentView& view, std::size_t top);
std::string moment_text(const LoadedSnapshot& loaded, const MomentQuery& query, const MomentView& view, std::size_t top);

// One JSON object per live allocation, by address.
std::string blocks_jsonl(const Snapshot& snapshot, const MomentQuery& query, const MomentView& view);

}  // namespace memsnap
