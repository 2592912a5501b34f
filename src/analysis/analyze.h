// Everything memsnap concludes from one snapshot, as plain data for the report writers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/attribution.h"
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

struct Pattern {
  std::string id;          // contract ids: fragmentation, capacity, pending_frees, ...
  std::string verdict;     // leak | expected | problem | info
  std::string confidence;  // high | medium | low
  std::string summary;
  std::vector<std::string> evidence;
  std::vector<std::string> sites;
  std::vector<std::string> fix;
};

// The training steps found on one device (analysis/steps.h) and live memory at each boundary.
struct DeviceSteps {
  std::int64_t device = 0;
  StepSource source = StepSource::None;
  std::string marker;  // the annotation name, or the site whose allocation starts each step
  std::size_t boundaries = 0;
  std::vector<std::int64_t> live;     // live requested bytes at each boundary (when found)
  std::vector<std::int64_t> time_us;  // time at each boundary (0 if unknown)
};

struct Analysis {
  TotalsReport totals;
  TraceSummary trace;
  std::vector<Site> sites;          // all live sites, largest first
  std::vector<DeviceTimeline> timelines;
  std::vector<Site> sites_at_peak;  // on the device with the highest peak
  std::int64_t peak_device = -1;
  std::vector<PoolStreamFree> pools;
  std::vector<OomAnalysis> ooms;
  std::vector<std::vector<Site>> sites_at_oom;  // parallel to ooms: live sites just before each OOM
  std::vector<DeviceSteps> steps;
  std::vector<std::string> invariant_violations;
  std::vector<Pattern> patterns;
  std::string headline;
  std::vector<std::string> next_steps;
  std::vector<std::string> uncertainties;
  AnalyzeOptions options;
};

Analysis analyze(const LoadedSnapshot& loaded, const AnalyzeOptions& options = {});

// The findings stage (patterns, headline, next steps, uncertainties) over the measured parts.
void derive_findings(const LoadedSnapshot& loaded, Analysis& analysis);

}  // namespace memsnap
