// Internal to the pattern diagnosis, shared by patterns.cpp and patterns_{growth,memory,state}.cpp:
// the thresholds of the rules in patterns.h, the helpers the pattern files share, and the
// detectors and Pattern builders that diagnose() calls. Not part of the public interface.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "analysis/patterns.h"
#include "base/format_bytes.h"
#include "base/units.h"

namespace memsnap::patterns_detail {

// Growth (retained_autograd_graph, growing_container).
constexpr std::size_t kMinIntervals = 3;
constexpr std::int64_t kMinGrowthBlocks = 3;
constexpr std::size_t kRisePercent = 75;
constexpr std::int64_t kSmallTensor = 1024;  // a loss, a scalar output or a running total
// optimizer_state_spike
constexpr std::size_t kOptimizerSharePercent = 10;
constexpr std::size_t kLaterSharePercent = 5;
// activation_pressure
constexpr std::size_t kActivationSharePercent = 50;
constexpr std::uint64_t kMinFreeable = 256 * kMiB;
// reference_cycles
constexpr std::size_t kBurstMinBlocks = kMinBurstFrees;
constexpr std::size_t kBurstMinSteps = 3;
constexpr std::size_t kMinBursts = 2;
// replicated_gradients
constexpr std::size_t kModelStateSharePercent = 50;
constexpr std::uint64_t kMinModelState = 512 * kMiB;


double pct(double part, double whole);

// The evidence line naming where the steps come from.
Sentence steps_evidence(const Steps& st, std::size_t devices);
// A leak-type pattern over steps only inferred from a period: at most medium confidence, and the
// evidence names the doubt. Nothing changes for steps the trace marks.
void qualify_inferred_steps(const Steps& st, Pattern& p);
// What cut the trace window short: memsnap's --max-trace-events, or the recording itself (history
// enabled mid-run, or its ring of max_entries full), or nothing.
enum class WindowCut { Whole, DroppedByCap, RecordedMidRun };
// The uncertainty line for a device whose window holds fewer than kMinIntervals complete steps
// (none when it holds enough, or when nothing in a whole trace marks steps); its advice follows
// what cut the window.
std::optional<Sentence> too_few_steps_line(const Steps& st, WindowCut cut, std::size_t devices);

// Growth: retained_autograd_graph and growing_container (patterns_growth.cpp).
std::vector<SiteGrowth> growing_sites(const StepTable& table, const SiteIndex& sites, std::int64_t device);
std::optional<RetainedGraph> retained_graph(const Snapshot& s, const std::vector<SiteGrowth>& growing, const StepTable& table,
                                            SiteIndex& sites, CategoryMemo& category);
Pattern retained_graph_pattern(const RetainedGraph& r, const Steps& st, const std::vector<std::int64_t>& live, std::size_t devices);
Pattern container_pattern(const std::vector<SiteGrowth>& sites, const Steps& st, std::size_t devices, const std::vector<Site>& live);

// Memory: optimizer_state_spike and activation_pressure (patterns_memory.cpp).
std::optional<OptimizerSpike> optimizer_spike(const Snapshot& s, const DeviceTimeline& t, const Lifetimes& lifetimes,
                                              SiteIndex& sites, const Measured& a);
Pattern optimizer_pattern(const OptimizerSpike& o);
std::optional<ActivationPressure> activation_pressure(const Snapshot& s, const DeviceTimeline& t, const Lifetimes& lifetimes,
                                                      const Steps& st, CategoryMemo& category, const DevicePhases* phases);
Pattern activation_pattern(const ActivationPressure& a, bool capacity_oom);

// State: reference_cycles (patterns_state.cpp, with model_state and replicated_gradients_pattern).
std::optional<ReferenceCycles> reference_cycles(const DeviceTimeline& timeline, const Steps& st,
                                                SiteIndex& sites);
Pattern cycles_pattern(const ReferenceCycles& r, const Steps& st, std::size_t devices);

// Workload: stale_gradients, activations_without_backward, forward_tensors_after_backward,
// optimizer_step_temporaries, attention_scores, from the phases at the peak (patterns_workload.cpp).
std::vector<Pattern> workload_patterns(const Snapshot& s, const Measured& a);
// out_of_place_activation at a device's peak (patterns_inplace.cpp).
std::optional<Pattern> out_of_place_activation(const Snapshot& s, const DeviceTimeline& t, const DevicePhases& d);

}  // namespace memsnap::patterns_detail
