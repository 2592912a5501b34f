// Everything memsnap concludes from one snapshot, as plain data for the report writers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/attribution.h"
#include "analysis/diagnosis.h"
#include "analysis/finding.h"
#include "analysis/fragmentation.h"
#include "analysis/steps.h"
#include "analysis/timeline.h"
#include "analysis/totals.h"
#include "analysis/trace_summary.h"
#include "model/load.h"

namespace memsnap {

struct AnalyzeOptions {
  std::optional<std::uint64_t> device_used;  // --device-used
  std::size_t top = 10;
};


// Filled by the stages in order: measure (totals .. invariant_violations), diagnose (diagnosis,
// patterns), conclude (headline, next_steps, uncertainties; the only writer of those, also for a
// diff and a rank directory: analysis/conclude.h).
struct Analysis {
  TotalsReport totals;
  TraceSummary trace;
  std::vector<Site> sites;          // all live sites, largest first; categories settled by conclude
  std::vector<DeviceTimeline> timelines;
  std::vector<Site> sites_at_peak;  // on the device with the highest peak
  std::int64_t peak_device = -1;
  std::vector<PoolStreamFree> pools;
  std::vector<OomAnalysis> ooms;
  std::vector<std::vector<Site>> sites_at_oom;  // parallel to ooms: live sites just before each OOM
  std::vector<std::string> invariant_violations;
  Diagnosis diagnosis;              // steps and the measured facts behind each pattern
  std::vector<Pattern> patterns;
  std::string headline;
  std::vector<NextStep> next_steps;
  std::vector<Sentence> uncertainties;
  AnalyzeOptions options;
};

Analysis analyze(const LoadedSnapshot& loaded, const AnalyzeOptions& options = {});

// The patterns of the allocator's state (analysis/allocator_patterns.cpp): fragmentation and
// capacity at each OOM, cached memory, pending frees, memory outside PyTorch.
std::vector<Pattern> allocator_patterns(const Snapshot& snapshot, const Analysis& analysis);

}  // namespace memsnap
