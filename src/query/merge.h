// `memsnap merge`: the rank comparison built from per-rank JSON reports alone (memsnap.report/1
// with its rank_summary), so each rank is analyzed where its snapshot was written and only the
// small reports travel.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/ranks.h"

namespace memsnap {

struct MergedRanks {
  RankReport ranks;
  nlohmann::ordered_json body;  // the report of the rank with the highest metric, as written
};

// The report files named: each path itself, or a directory's *.json files (sorted by name).
std::vector<std::string> report_files(const std::vector<std::string>& paths);

// Reads every report (unreadable ones are skipped with the reason) and compares the ranks
// exactly as `memsnap DIR` does. Throws InputError when none can be used.
MergedRanks merge_reports(const std::vector<std::string>& files);

}  // namespace memsnap
