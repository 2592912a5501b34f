// Two snapshots of one run, compared site by site: live bytes and blocks per allocation site,
// matched by the resolved file:line and function (never by address; files of two clones by their
// path within the clone, analysis/checkout_roots.h), new / grown / shrunk /
// removed, with the sites that grew in both bytes and blocks (>= 2 blocks) called leaking or
// retained and the pattern they match. Also warns when the pair cannot be from the same run
// (different devices or allocator settings, LATER older than PATH, the later trace replaying
// other live bytes at the earlier snapshot's moment, different parameter memory, no common
// site, stacks on one side only); with a warning no site gets a verdict.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/analyze.h"
#include "analysis/checkout_roots.h"
#include "analysis/diff_runs.h"

namespace memsnap {

enum class DiffStatus { New, Grown, Shrunk, Removed, Same };
template <>
struct EnumNames<DiffStatus> {
  static constexpr std::array<std::string_view, 5> names = {"new", "grown", "shrunk", "removed", "same"};
};
enum class DiffVerdict { None, Leaking, Retained, Expected };
template <>
struct EnumNames<DiffVerdict> {
  static constexpr std::array<std::string_view, 4> names = {"", "leaking", "retained", "expected"};
};
inline bool is_leak(DiffVerdict v) { return v == DiffVerdict::Leaking || v == DiffVerdict::Retained; }

struct DiffSite {
  std::string site;  // file:line, or "[no stack recorded]"
  std::string file;
  std::int64_t line = 0;
  std::string function;
  Category category = Category::Unknown;
  bool no_stack = false;
  std::uint64_t bytes_before = 0, bytes_after = 0;
  std::uint64_t blocks_before = 0, blocks_after = 0;
  std::int64_t delta_bytes = 0, delta_blocks = 0;
  DiffStatus status = DiffStatus::Same;
  DiffVerdict verdict = DiffVerdict::None;  // None: no claim
  std::optional<PatternId> pattern;         // the pattern the growth matches
};

// Sites of `after` against `before`, sorted by delta_bytes (largest growth first), then
// delta_blocks, then site.
std::vector<DiffSite> diff_sites(const std::vector<Site>& before, const std::vector<Site>& after);

struct DiffReport {
  std::string before_path, after_path;
  Totals before, after;  // overall
  std::vector<DiffSite> sites;
  std::optional<std::int64_t> steps_between;  // from ProfilerStep#N numbers
  std::optional<double> seconds_between;      // newest trace events
  std::vector<std::string> warnings;          // the pair may not be from one run
  std::vector<Pattern> patterns;              // what the growth matches
  // Peak against peak (each side's device with the highest peak), when both traces have one.
  std::optional<std::int64_t> peak_before, peak_after;
  std::vector<DiffSite> peak_sites;  // sites_at_peak against sites_at_peak, by growth
  std::vector<KindDelta> kinds;      // by kind at the peaks (at the end when a side has no peak)
  bool kinds_at_peak = false;
  DiffRelation relation = DiffRelation::OneRun;
  std::string relation_evidence;     // why TwoRuns ("" for OneRun)
  std::vector<SettingChange> settings;
  std::optional<StepAlignedDiff> steps;  // two runs that both have steps: step i against step i
  bool stacks_on_neither = false;    // no live site has a stack on either side: growth cannot be placed
  // The directories the earlier run's files lie in where the later's lie elsewhere (another clone):
  // the earlier sites carry the later's paths in `sites`, `peak_sites` and `kinds`.
  std::vector<RootChange> roots;
};

DiffReport diff_snapshots(const LoadedSnapshot& before, const Analysis& before_analysis, const LoadedSnapshot& after,
                          const Analysis& after_analysis);

// " (N steps apart)" or " (S s apart)" or "": how far apart the pair is, for sentences.
std::string steps_phrase(const DiffReport& diff);

}  // namespace memsnap
