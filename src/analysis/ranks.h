// Per-rank analyses compared (read from a directory by query/rank_directory.h, or from JSON
// reports by query/merge.h): peak, reserved, allocated, inactive,
// OOM events and top site per rank, the outlier ranks and the sites that explain the
// difference, and the patterns found across ranks (replicated DDP state among them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/analyze.h"
#include "analysis/diff.h"
#include "analysis/patterns.h"
#include "model/load.h"

namespace memsnap {

enum class RankMetric { PeakAllocated, Allocated };
template <>
struct EnumNames<RankMetric> {
  static constexpr std::array<std::string_view, 2> names = {"peak_allocated", "allocated"};
};

// How the ranks' metrics spread: all within the tolerance; some ranks far from a robust centre
// (compared with the rank closest to the median); or uneven throughout, with no common level
// (each compared with the lowest rank).
enum class RankSpread { Balanced, Outliers, Uneven };
template <>
struct EnumNames<RankSpread> {
  static constexpr std::array<std::string_view, 3> names = {"balanced", "outliers", "uneven"};
};

struct RankResult {
  std::int64_t rank = 0;
  std::string path;
  InputInfo input;
  Analysis analysis;  // timeline curves and live sets dropped to save memory
  ModelState model;
  std::uint64_t oom_events = 0;
  std::int64_t metric = 0;  // the compared value (peak_allocated, else allocated)
};

struct RankOutlier {
  std::int64_t rank = 0;
  std::int64_t reference_rank = 0;  // the rank closest to the median (RankSpread::Uneven: the lowest)
  std::int64_t value = 0, median = 0;
  std::string reason;               // one sentence with the numbers
  std::vector<DiffSite> sites;      // the sites that explain the difference, largest first
};

struct RankReport {
  std::string directory;
  std::vector<RankResult> ranks;  // by rank
  RankMetric metric = RankMetric::Allocated;
  std::int64_t median = 0;
  RankSpread spread = RankSpread::Balanced;
  std::vector<RankOutlier> outliers;
  std::vector<Sentence> warnings;  // the files may not be ranks of one job
  std::vector<Pattern> patterns;  // found across ranks (each says on which ranks)
  std::vector<std::string> skipped;  // files that could not be analyzed, with the reason
  std::size_t body = 0;           // index of the rank the report body describes (highest metric)
};

// The rank from the digits in a file name: those after "rank" when present ("rank3_step100.pickle"
// -> 3), else the last run of digits ("mem_r5.pickle" -> 5); -1 when the name has none.
std::int64_t rank_from_name(const std::string& filename);

// The rank of each file: the digits of its name when every name has distinct ones, else its
// position in `files`.
std::vector<std::int64_t> ranks_of_files(const std::vector<std::string>& files);

// One rank's result from its analysis: the model state and OOM count kept, the timeline curves,
// lifetimes and live sets dropped to save memory.
RankResult rank_result(const std::string& path, const LoadedSnapshot& loaded, Analysis analysis);
void drop_bulky(Analysis& analysis);

// The comparison of analyzed ranks: `files[i]` names rank i's snapshot (its rank comes from the
// digits in the name), `results[i]` is its analysis or empty with the reason in `errors[i]`.
// Throws InputError when no rank was analyzed. Shared by `memsnap DIR` and `memsnap merge`.
RankReport compare_ranks(const std::string& directory, const std::vector<std::string>& files,
                         std::vector<std::optional<RankResult>> results, const std::vector<std::string>& errors);

// "peak" or "live memory", for sentences.
std::string metric_label(RankMetric metric);
// "0, 3, 5".
std::string rank_list(const std::vector<std::int64_t>& ranks);

}  // namespace memsnap
