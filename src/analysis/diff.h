// Two snapshots of one run, compared site by site: live bytes and blocks per allocation site,
// matched by the resolved file:line and function (never by address), new / grown / shrunk /
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

namespace memsnap {

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
  std::string status;   // new | grown | shrunk | removed | same
  std::string verdict;  // leaking | retained | expected | "" (no claim)
  std::string pattern;  // the pattern id the growth matches, or ""
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
  std::string headline;
  std::vector<Pattern> patterns;              // what the growth matches
};

DiffReport diff_snapshots(const LoadedSnapshot& before, const Analysis& before_analysis, const LoadedSnapshot& after,
                          const Analysis& after_analysis);

// Puts the diff's conclusions into the LATER snapshot's analysis: headline, patterns (merged by
// id), next steps and warnings.
void apply_diff(const DiffReport& diff, Analysis& after);

}  // namespace memsnap
