// Report sections for two-snapshot diffs (`--diff`) and rank directories: JSON keys `diff`,
// `ranks`, `outlier_ranks` and `rank_comparison`, and the matching text sections.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/diff.h"
#include "analysis/ranks.h"

namespace memsnap {

// Adds "diff" to a report built by json_report() for the later snapshot.
void add_diff_json(nlohmann::ordered_json& report, const DiffReport& diff);
// Adds "ranks", "outlier_ranks" and "rank_comparison" to the report of the body rank.
void add_ranks_json(nlohmann::ordered_json& report, const RankReport& ranks, std::size_t top);

std::string diff_text(const DiffReport& diff, std::size_t top);
std::string ranks_text(const RankReport& ranks);

}  // namespace memsnap
