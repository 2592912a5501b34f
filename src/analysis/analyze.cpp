// Runs the analysis stages over a loaded snapshot and checks the totals' invariants.
#include "analysis/analyze.h"
#include "analysis/patterns_devices.h"
#include "analysis/patterns_kinds.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <optional>

#include "analysis/allocation_tags.h"
#include "analysis/conclude.h"
#include "analysis/patterns.h"
#include "analysis/plausibility.h"
#include "analysis/snapshot_entries.h"
#include "base/format_bytes.h"
#include "base/parallel.h"
#include "base/phase_timer.h"

namespace memsnap {
namespace {

std::vector<std::string> check_invariants(const Snapshot& s, const TotalsReport& totals, const std::vector<Site>& sites) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.segments.size(); ++i) {
    const Segment& seg = s.segments[i];
    std::uint64_t sum = 0;
    for (std::uint32_t k = 0; k < seg.block_count; ++k) sum += s.blocks[seg.first_block + k].size;
    if (sum != seg.total_size) {
      out.push_back(fmt::format("segment {} (device {}): blocks add up to {} B but total_size is {} B", i, seg.device, sum,
                                seg.total_size));
    }
  }
  for (const auto& d : totals.devices) {
    const Totals& t = d.totals;
    if (t.reserved != t.allocated + t.pending_free + t.inactive) {
      out.push_back(fmt::format("device {}: reserved {} B != allocated {} B + pending free {} B + inactive {} B", d.device,
                                t.reserved, t.allocated, t.pending_free, t.inactive));
    }
  }
  std::uint64_t site_bytes = 0;
  for (const Site& site : sites) site_bytes += site.bytes;
  if (site_bytes != totals.overall.allocated) {
    out.push_back(fmt::format("site bytes add up to {} B but allocated is {} B", site_bytes, totals.overall.allocated));
  }
  return out;
}

}  // namespace

Replay replay(const Snapshot& s) {
  PhaseTimer t("timelines");
  return {build_timelines(s)};
}

namespace {

// What measure() finds beside the phases and the steps, as tasks that read only the snapshot,
// the timelines and what each task finds itself; the sites of the OOMs and of the view's peak
// come after them (they need the sites' cache, the OOMs and the budgets).
void measure_sites(const Snapshot& s, const Replay& r, SiteCache& site_cache, Measures& m) {
  const std::vector<LiveItem> live = final_live_items(s, r.timelines);
  m.sites = attribute(live, site_cache);
  m.labels = label_bytes(s, live);
  std::int64_t best = -1;
  for (const auto& t : r.timelines) {
    if (t.peak_allocated && *t.peak_allocated > best) {
      best = *t.peak_allocated;
      m.peak_device = t.device;
      m.sites_at_peak = attribute(t.live_at_peak, site_cache);
    }
  }
}

void measure_budgets(const Snapshot& s, const Replay& r, Measures& m) {
  m.totals = compute_totals(s, r.timelines);
  m.budgets = memory_budgets(s, r.timelines, m.totals);
  m.view = default_view(m.budgets);
}

void measure_ooms(const Snapshot& s, const Replay& r, Measures& m) {
  m.trace = summarize_trace(s, r.timelines);
  for (const auto& t : r.timelines) m.trace.pending_free_requests += t.pending_requests;
  PhaseTimer timer("ooms");
  m.ooms = analyze_ooms(s, m.trace, r.timelines);
}

void measure_pools(const Snapshot& s, Measures& m) {
  m.pools = free_by_pool_and_stream(s);
  m.memory_pools = reserved_by_pool(m.pools);
  m.host = analyze_host_memory(s);
}

void attribute_ooms_and_view(const Replay& r, SiteCache& site_cache, Measures& m) {
  std::size_t first = 0;  // m.ooms is in timeline order
  for (const DeviceTimeline& t : r.timelines) {
    for (std::size_t i = 0; i < t.live_at_oom.size(); ++i) {
      const std::size_t k = first + t.studied_ooms[i];
      if (k < m.ooms.size()) m.ooms[k].sites_before = attribute(live_items(t, t.live_at_oom[i]), site_cache);
    }
    first += t.oom_events.size();
  }
  for (const auto& t : r.timelines) {
    if (t.device == m.view.device && t.device != m.peak_device && t.peak_allocated) m.sites_at_view_peak = attribute(t.live_at_peak, site_cache);
  }
}

}  // namespace

Measures measure(const Snapshot& s, const Replay& r, SiteGrouping grouping, std::vector<std::string> implausible) {
  Measures m;
  PhaseTimer measure_timer("measure");
  SiteCache site_cache(s, grouping);  // each stack described once for the end, the peak and every OOM
  // Six independent tasks on as many cores as there are, the longest first (the phases on every
  // input; the steps without annotations; the sites and the OOMs on files with C++ frames).
  parallel_for(6, [&](std::size_t task) {
    switch (task) {
      case 0: {
        PhaseTimer timer("phases");
        m.phases = find_all_phases(s, r.timelines);
        return;
      }
      case 1: {
        PhaseTimer timer("steps");
        for (const DeviceTimeline& t : r.timelines) m.steps.push_back(find_steps(s, t));
        return;
      }
      case 2: {
        PhaseTimer timer("budgets");
        measure_budgets(s, r, m);
        return;
      }
      case 3: {
        PhaseTimer timer("sites");
        measure_sites(s, r, site_cache, m);
        return;
      }
      case 4: measure_ooms(s, r, m); return;
      default: measure_pools(s, m); return;
    }
  });
  attribute_ooms_and_view(r, site_cache, m);
  m.invariant_violations = check_invariants(s, m.totals, m.sites);
  for (auto& v : budget_violations(m.budgets)) m.invariant_violations.push_back(std::move(v));
  for (auto& v : implausible) m.invariant_violations.push_back(std::move(v));
  for (auto& v : snapshot_entry_mismatches(s, r.timelines)) m.invariant_violations.push_back(std::move(v));
  return m;
}

Diagnosed diagnose_patterns(const Snapshot& s, const Measured& m) {
  Diagnosed d;
  // The devices' imbalance (its sites attributed afresh) beside the diagnosis, whose two halves
  // a device seldom take equally long: it takes the core the shorter half leaves.
  std::optional<Pattern> imbalance;
  parallel_for(2, [&](std::size_t task) {
    if (task == 1) {
      imbalance = device_imbalance(s, m);
      return;
    }
    d.patterns = allocator_patterns(s, m);
    d.diagnosis = diagnose(s, m);
  });
  for (auto& p : d.diagnosis.patterns) d.patterns.push_back(std::move(p));
  d.diagnosis.patterns.clear();
  if (imbalance) d.patterns.push_back(std::move(*imbalance));
  if (auto p = autocast_weight_copies(m)) d.patterns.push_back(std::move(*p));
  if (auto p = kv_cache(m)) d.patterns.push_back(std::move(*p));
  return d;
}

Analysis analyze(const LoadedSnapshot& loaded, const AnalyzeOptions& options) {
  PhaseTimer timer("analyze");
  const Snapshot& s = loaded.snapshot;
  Analysis a;
  a.options = options;
  // The plausibility checks read only the snapshot: they take the core the replay leaves idle
  // while one device's curve is walked.
  std::vector<std::string> implausible;
  parallel_for(2, [&](std::size_t task) {
    if (task == 0) static_cast<Replay&>(a) = replay(s);
    else implausible = implausible_values(s);
  });
  static_cast<Measures&>(a) = measure(s, a, options.group_by, std::move(implausible));
  PhaseTimer t("findings");
  static_cast<Diagnosed&>(a) = diagnose_patterns(s, a);
  settle_categories(a.patterns, a.sites);
  static_cast<Conclusions&>(a) = conclude(s, a);
  return a;
}

}  // namespace memsnap
