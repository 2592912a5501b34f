// Everything memsnap concludes from one snapshot, stage by stage, as plain data for the report writers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/allocation_tags.h"
#include "analysis/attribution.h"
#include "analysis/diagnosis.h"
#include "analysis/finding.h"
#include "analysis/fragmentation.h"
#include "analysis/host_memory.h"
#include "analysis/memory_pools.h"
#include "analysis/memory_budget.h"
#include "analysis/phases.h"
#include "analysis/steps.h"
#include "analysis/timeline.h"
#include "analysis/totals.h"
#include "analysis/trace_summary.h"
#include "analysis/view_device.h"
#include "model/load.h"

namespace memsnap {

struct AnalyzeOptions {
  std::optional<std::uint64_t> device_used;  // --device-used
  std::size_t top = 10;
  SiteGrouping group_by = SiteGrouping::Site;  // --group-by: the rows of the site tables
};


// The stages, each a function from the structs before it to its own struct:
//
//   Snapshot ─replay─▶ Replay ─measure─▶ Measures ─diagnose─▶ Diagnosed ─conclude─▶ Conclusions
//
// An Analysis is all four (fields are reached directly: analysis.totals, analysis.patterns).

// The trace replayed once per device: curves, lifetimes with their provenance, live sets at the
// peak and before each OOM, step marks (timeline.h).
struct Replay {
  std::vector<DeviceTimeline> timelines;
};

// Numbers measured from the final state and the replay.
struct Measures {
  TotalsReport totals;
  TraceSummary trace;
  std::vector<Site> sites;          // all live sites, largest first; categories settled before conclude
  std::vector<Site> sites_at_peak;  // on the device with the highest peak
  std::int64_t peak_device = -1;
  DefaultView view;                 // the device the default views show (view_device.h)
  std::vector<Site> sites_at_view_peak;  // live at view.device's peak when that is not peak_device
  std::vector<PoolStreamFree> pools;
  std::vector<PoolTotals> memory_pools;  // reserved by (device, memory pool)
  HostMemoryReport host;                 // pinned host memory, apart from the devices
  std::vector<LabelBytes> labels;        // live bytes by user_metadata label (empty: no labels)
  std::vector<OomAnalysis> ooms;     // one struct per OOM moment, in trace.ooms order
  std::vector<MemoryBudget> budgets;  // per device: the end, the peak, each OOM (memory_budget.h)
  std::vector<std::string> invariant_violations;
  std::vector<DevicePhases> phases;  // per timeline, in timeline order (phases.h)
  std::vector<Steps> steps;          // per timeline, in timeline order (steps.h)
};

// What the diagnosis reads.
struct Measured : Replay, Measures {
  AnalyzeOptions options;
};

// The named patterns found, and the facts each was decided from.
struct Diagnosed {
  Diagnosis diagnosis;  // steps and the measured facts behind each pattern
  std::vector<Pattern> patterns;
};

// Written only by the conclude stage (conclude.h), also for a diff and a rank directory.
struct Conclusions {
  std::string headline;
  std::vector<NextStep> next_steps;
  std::vector<Sentence> uncertainties;
};

struct Analysis : Measured, Diagnosed, Conclusions {};

Replay replay(const Snapshot& snapshot);
// `implausible`: what implausible_values(snapshot) found (it reads only the snapshot, so analyze
// runs it beside the replay).
Measures measure(const Snapshot& snapshot, const Replay& replay, SiteGrouping grouping, std::vector<std::string> implausible);
// allocator_patterns, then the patterns of patterns.h, in report order.
Diagnosed diagnose_patterns(const Snapshot& snapshot, const Measured& measured);

Analysis analyze(const LoadedSnapshot& loaded, const AnalyzeOptions& options = {});

// The patterns of the allocator's state (analysis/allocator_patterns.cpp): fragmentation and
// capacity at each OOM, cached memory, pending frees, memory outside PyTorch.
std::vector<Pattern> allocator_patterns(const Snapshot& snapshot, const Measured& measured);

}  // namespace memsnap
