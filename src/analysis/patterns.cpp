// The named leak and retention patterns: diagnose() runs the rules in patterns.h per device, over
// the allocation lifetimes and the per-site series at step boundaries, and orders the patterns
// found; the detectors live in patterns_growth.cpp, patterns_memory.cpp and patterns_state.cpp.
// Also the helpers those files share (declared in patterns_internal.h).
#include "analysis/patterns.h"

#include <algorithm>
#include <fmt/format.h>

#include "analysis/patterns_internal.h"
#include "base/format_bytes.h"
#include "base/phase_timer.h"

namespace memsnap {
namespace patterns_detail {


double pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0; }

bool path_has(std::string_view file, std::string_view part) {
  if (file.find(part) != std::string_view::npos) return true;
  std::string alt(part);
  std::replace(alt.begin(), alt.end(), '/', '\\');
  return file.find(alt) != std::string_view::npos;
}

const TraceEvents& events_of(const Snapshot& s, std::int64_t device) {
  static const TraceEvents kNone;
  if (device < 0 || static_cast<std::size_t>(device) >= s.device_traces.size()) return kNone;
  return s.device_traces[static_cast<std::size_t>(device)].events;
}

std::string steps_evidence(const Steps& st, std::size_t devices) {
  return fmt::format("steps from {}{}: {} step boundaries{}", step_source_name(st.source),
                     st.marker.empty() ? "" : " (" + st.marker + ")", st.boundaries.size(),
                     devices > 1 ? fmt::format(" on device {}", st.device) : "");
}

}  // namespace patterns_detail

Diagnosis diagnose(const Snapshot& s, const Analysis& a) {
  Diagnosis d;
  using namespace patterns_detail;
  SiteIndex sites(s);
  CategoryMemo category(s);
  const std::size_t devices = a.timelines.size();
  bool capacity_oom = false;
  for (const OomAnalysis& o : a.ooms) capacity_oom |= o.verdict == OomVerdict::Capacity;
  std::vector<Pattern> leaks, others;
  for (const DeviceTimeline& t : a.timelines) {
    PhaseTimer timer("patterns of one device");
    std::optional<PhaseTimer> sub;
    const auto& lifetimes = t.lifetimes;
    sub.emplace("  find_steps");
    Steps st = find_steps(s, t);
    sub.emplace("  step_table etc");
    d.steps.push_back({t.device, st.source, st.marker, st.boundaries.size(), {}, {}});
    if (st.found()) {
      const StepTable table = step_table(s, t, lifetimes, st, sites);
      d.steps.back().live = table.live;
      d.steps.back().time_us = table.time_us;
      auto growing = growing_sites(table, sites, t.device);
      if (!growing.empty()) {
        d.growing.insert(d.growing.end(), growing.begin(), growing.end());
        if (auto r = retained_graph(s, growing, table, sites, category); r && !d.retained_graph) {
          leaks.push_back(retained_graph_pattern(*r, st, table.live, devices));
          d.retained_graph = std::move(r);
        } else if (!r && d.containers.empty()) {
          leaks.push_back(container_pattern(growing, st, devices, a.sites));
          d.containers = growing;
        }
      }
      sub.emplace("  cycles");
      if (!d.cycles) {
        if (auto r = reference_cycles(s, t, st, sites)) {
          others.push_back(cycles_pattern(*r, st, devices));
          d.cycles = std::move(r);
        }
      }
    }
    sub.emplace("  optimizer_spike");
    if (auto o = optimizer_spike(s, t, lifetimes, sites, a); o && (!d.optimizer_spike || o->bytes > d.optimizer_spike->bytes)) {
      d.optimizer_spike = std::move(o);
    }
    sub.emplace("  activation");
    if (t.device == a.peak_device && !d.activation) d.activation = activation_pressure(s, t, lifetimes, st, category);
  }
  d.patterns = std::move(leaks);
  if (d.optimizer_spike) d.patterns.push_back(optimizer_pattern(*d.optimizer_spike));
  if (d.activation) d.patterns.push_back(activation_pattern(*d.activation, capacity_oom));
  for (auto& p : others) d.patterns.push_back(std::move(p));
  const ModelState m = model_state(s);
  if (m.ddp_frames && !m.sharded_frames && m.total() >= kMinModelState && m.total() * 100 >= m.live * kModelStateSharePercent) {
    d.replication = m;
    d.patterns.push_back(replicated_gradients_pattern(m, 1, !a.ooms.empty()));
  }
  return d;
}

void add_diagnosis_patterns(const Snapshot& s, Analysis& a) {
  Diagnosis d = diagnose(s, a);
  for (auto& p : d.patterns) a.patterns.push_back(std::move(p));
  a.steps = std::move(d.steps);
}

}  // namespace memsnap
