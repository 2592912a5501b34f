// Runs the analysis stages over a loaded snapshot and checks the totals' invariants.
#include "analysis/analyze.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>

#include "analysis/conclude.h"
#include "analysis/patterns.h"
#include "analysis/plausibility.h"
#include "base/format_bytes.h"
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

Analysis analyze(const LoadedSnapshot& loaded, const AnalyzeOptions& options) {
  PhaseTimer timer("analyze");
  const Snapshot& s = loaded.snapshot;
  Analysis a;
  a.options = options;
  SiteCache site_cache(s);
  a.sites = attribute(live_blocks(s), site_cache);
  {
    PhaseTimer t("timelines");
    a.timelines = build_timelines(s);
  }
  a.totals = compute_totals(s, a.timelines);
  a.trace = summarize_trace(s, a.timelines);
  for (const auto& t : a.timelines) a.trace.pending_free_requests += t.pending_requests;
  std::int64_t best = -1;
  for (const auto& t : a.timelines) {
    if (t.peak_allocated && *t.peak_allocated > best) {
      best = *t.peak_allocated;
      a.peak_device = t.device;
      a.sites_at_peak = attribute(t.live_at_peak, site_cache);
    }
  }
  a.pools = free_by_pool_and_stream(s);
  {
    PhaseTimer t("ooms");
    a.ooms = analyze_ooms(s, a.trace, a.timelines);
  }
  for (const DeviceTimeline& t : a.timelines) {  // a.ooms is in timeline order
    for (const auto& live : t.live_at_oom) a.sites_at_oom.push_back(attribute(live_items(t, live), site_cache));
  }
  a.invariant_violations = check_invariants(s, a.totals, a.sites);
  for (auto& v : implausible_values(s)) a.invariant_violations.push_back(std::move(v));
  PhaseTimer t("findings");
  a.patterns = allocator_patterns(s, a);
  a.diagnosis = diagnose(s, a);
  for (auto& p : a.diagnosis.patterns) a.patterns.push_back(std::move(p));
  a.diagnosis.patterns.clear();
  conclude(s, a);
  return a;
}

}  // namespace memsnap
