// The named leak and retention patterns: diagnose() runs the rules in patterns.h per device, over
// the allocation lifetimes and the per-site series at step boundaries, and orders the patterns
// found; the detectors live in patterns_growth.cpp, patterns_memory.cpp and patterns_state.cpp.
// Also the helpers those files share (declared in patterns_internal.h).
#include "analysis/patterns.h"

#include <algorithm>
#include <fmt/format.h>

#include "analysis/patterns_internal.h"
#include "base/format_bytes.h"
#include "base/parallel.h"

namespace memsnap {
namespace patterns_detail {


double pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0; }

Sentence steps_evidence(const Steps& st, std::size_t devices) {
  return sentence("steps from {}{}: {} step boundaries{}", std::string(step_source_name(st.source)),
                     st.marker.empty() ? "" : " (" + st.marker + ")", st.boundaries.size(),
                     devices > 1 ? fmt::format(" on device {}", st.device) : "");
}

void qualify_inferred_steps(const Steps& st, Pattern& p) {
  if (!st.inferred()) return;
  if (p.confidence == Confidence::High) p.confidence = Confidence::Medium;
  p.evidence.push_back(sentence("doubt: the steps are only inferred from a repeating allocation pattern (no step annotations or "
                       "optimizer.step() runs mark them); if they are the layers of one pass, this is not a leak"));
}

std::optional<Sentence> too_few_steps_line(const Steps& st, WindowCut cut, std::size_t devices) {
  const std::string where = devices > 1 ? fmt::format(" on device {}", st.device) : "";
  const bool partial_window = cut != WindowCut::Whole;
  // --max-trace-events helps only where it dropped events; otherwise the recording began mid-run
  // or its own ring (max_entries) dropped the older entries.
  const std::string more = cut == WindowCut::DroppedByCap
                               ? "; keep more trace events (a larger --max-trace-events, or a larger "
                                 "_record_memory_history(max_entries=...)) to see more steps"
                           : cut == WindowCut::RecordedMidRun
                               ? "; record more history (torch.cuda.memory._record_memory_history(max_entries=...) with a larger "
                                 "ring, enabled before the steps to compare) to see more steps: memsnap dropped no event"
                               : "";
  if (st.found() && st.boundaries.size() > kMinIntervals) return std::nullopt;
  if (st.found() || st.too_few_marks > 0) {
    const std::size_t complete = st.found() ? st.boundaries.size() - 1 : st.too_few_marks - 1;
    const StepSource source = st.found() ? st.source : st.too_few_source;
    return sentence("not enough steps to tell{} whether memory leaks: the trace window holds {} complete step{} (from {}); "
                    "a leak needs growth over at least {}{}",
                    where, complete, plural_s(complete), std::string(step_source_name(source)), kMinIntervals, more);
  }
  if (!partial_window) return std::nullopt;
  return sentence("not enough steps to tell{} whether memory leaks: no training steps were found in the partial trace window "
                     "(no step annotations, optimizer.step() runs or repeating allocation pattern){}",
                  where, more);
}

}  // namespace patterns_detail

namespace {

// What one device's trace shows, computed on its own (devices, and two halves of each, run in
// parallel) and merged in device order by diagnose().
struct DeviceResult {
  Steps steps;
  DeviceSteps summary;
  std::vector<SiteGrowth> growing;
  std::optional<RetainedGraph> retained;
  std::vector<Pattern> retained_pattern;  // 0 or 1
  std::optional<ReferenceCycles> cycles;
  std::optional<OptimizerSpike> spike;
  std::optional<ActivationPressure> activation;
  std::vector<std::int64_t> live;  // live bytes at the step boundaries
  std::optional<Sentence> too_few_steps;  // the uncertainty when the window holds too few steps
};

// The step table and what follows from it: growing sites, a retained graph.
void diagnose_growth(const Snapshot& s, const DeviceTimeline& t, std::size_t devices, DeviceResult& r) {
  using namespace patterns_detail;
  if (!r.steps.found()) return;
  SiteIndex sites(s);
  CategoryMemo category(s);
  const StepTable table = step_table(s, t, t.lifetimes, r.steps, sites);
  r.summary.live = table.live;
  r.summary.time_us = table.time_us;
  r.summary.step_peak = table.step_peak;
  r.live = table.live;
  r.growing = growing_sites(table, sites, t.device);
  if (!r.growing.empty()) {
    r.retained = retained_graph(s, r.growing, table, sites, category);
    if (r.retained) {
      r.retained_pattern.push_back(retained_graph_pattern(*r.retained, r.steps, table.live, devices));
      qualify_inferred_steps(r.steps, r.retained_pattern.back());
    }
  }
}

// The patterns that need only the steps and the lifetimes: cycles, optimizer spike, activations.
void diagnose_lifetimes(const Snapshot& s, const Measured& a, const DeviceTimeline& t, DeviceResult& r) {
  using namespace patterns_detail;
  SiteIndex sites(s);
  CategoryMemo category(s);
  if (r.steps.found()) r.cycles = reference_cycles(t, r.steps, sites);
  r.spike = optimizer_spike(s, t, t.lifetimes, sites, a);
  const DevicePhases* phases = nullptr;
  for (const DevicePhases& d : a.phases) {
    if (d.device == t.device) phases = &d;
  }
  if (t.device == a.peak_device) r.activation = activation_pressure(s, t, t.lifetimes, r.steps, category, phases);
}

}  // namespace

Diagnosis diagnose(const Snapshot& s, const Measured& a) {
  Diagnosis d;
  using namespace patterns_detail;
  const std::size_t devices = a.timelines.size();
  bool capacity_oom = false;
  for (const OomAnalysis& o : a.ooms) capacity_oom |= o.verdict == OomVerdict::Capacity;
  std::vector<DeviceResult> results(devices);
  for (std::size_t i = 0; i < devices; ++i) {
    const DeviceTimeline& t = a.timelines[i];
    DeviceResult& r = results[i];
    r.steps = i < a.steps.size() ? a.steps[i] : find_steps(s, t);  // measure() found them
    r.summary = {t.device, r.steps.source, r.steps.marker, r.steps.boundaries.size(), {}, {}, {}};
    const WindowCut cut = a.trace.dropped > 0                                              ? WindowCut::DroppedByCap
                          : t.frees_before_window > 0 || t.live_from_before_window > 0 ? WindowCut::RecordedMidRun
                                                                                       : WindowCut::Whole;
    // A trace too short to show a peak has its own line (conclude.cpp's uncertainties), which says
    // to record again: no second one about steps.
    if (t.lifetimes.size() > 0 && peak_certainty(t) != PeakCertainty::TooShort) r.too_few_steps = too_few_steps_line(r.steps, cut, devices);
  }
  // Two independent halves per device, so even one device keeps two cores busy.
  parallel_for(devices * 2, [&](std::size_t i) {
    const std::size_t d = i / 2;
    if (i % 2 == 0) diagnose_growth(s, a.timelines[d], devices, results[d]);
    else diagnose_lifetimes(s, a, a.timelines[d], results[d]);
  });
  std::vector<Pattern> leaks, others;
  for (DeviceResult& r : results) {
    d.steps.push_back(std::move(r.summary));
    if (r.too_few_steps) d.uncertainties.push_back(std::move(*r.too_few_steps));
    if (!r.growing.empty()) {
      d.growing.insert(d.growing.end(), r.growing.begin(), r.growing.end());
      if (r.retained && !d.retained_graph) {
        leaks.push_back(std::move(r.retained_pattern.front()));
        d.retained_graph = std::move(r.retained);
      } else if (!r.retained && d.containers.empty()) {
        leaks.push_back(container_pattern(r.growing, r.steps, devices, a.sites));
        qualify_inferred_steps(r.steps, leaks.back());
        d.containers = r.growing;
      }
    }
    if (r.cycles && !d.cycles) {
      others.push_back(cycles_pattern(*r.cycles, r.steps, devices));
      qualify_inferred_steps(r.steps, others.back());
      d.cycles = std::move(r.cycles);
    }
    if (r.spike && (!d.optimizer_spike || r.spike->bytes > d.optimizer_spike->bytes)) d.optimizer_spike = std::move(r.spike);
    if (r.activation && !d.activation) d.activation = std::move(r.activation);
  }
  d.patterns = std::move(leaks);
  if (d.optimizer_spike) d.patterns.push_back(optimizer_pattern(*d.optimizer_spike));
  if (d.activation) d.patterns.push_back(activation_pattern(*d.activation, capacity_oom));
  for (auto& p : workload_patterns(s, a)) d.patterns.push_back(std::move(p));
  for (auto& p : others) d.patterns.push_back(std::move(p));
  const ModelState m = model_state(s);
  if (m.ddp_frames && !m.sharded_frames && m.total() >= kMinModelState && m.total() * 100 >= m.live * kModelStateSharePercent) {
    d.replication = m;
    d.patterns.push_back(replicated_gradients_pattern(m, 1, !a.ooms.empty()));
  }
  return d;
}


}  // namespace memsnap
