// A directory of per-rank snapshots, read and analyzed in parallel (a pool of std::threads, one
// per core) and compared (analysis/ranks.h). The body rank (the highest peak) keeps its full
// snapshot and analysis, so the report is written without reading that file a second time.
#pragma once

#include <string>
#include <vector>

#include "analysis/ranks.h"

namespace memsnap {

struct RankDirectory {
  RankReport ranks;
  LoadedSnapshot body_loaded;  // the snapshot of ranks.ranks[ranks.body]
  Analysis body;               // its full analysis (the rank results drop their bulky parts)
};

// Snapshot files of a directory, sorted by name (hidden files and other extensions skipped).
std::vector<std::string> rank_files(const std::string& directory);

// Throws InputError when no file of the directory can be analyzed. `threads` 0 = all cores.
RankDirectory analyze_rank_directory(const std::string& directory, const LoadOptions& load, const AnalyzeOptions& options,
                                     unsigned threads = 0);

}  // namespace memsnap
