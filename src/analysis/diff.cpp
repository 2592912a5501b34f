// Site-by-site comparison of two snapshots of one run, the leak verdicts it supports, and the
// checks that the pair belongs together.
#include "analysis/diff.h"

#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>
#include <map>
#include <set>

#include "analysis/memory_budget.h"
#include "analysis/patterns.h"
#include "analysis/steps.h"
#include "base/checked.h"
#include "base/format_bytes.h"
#include "base/units.h"

namespace memsnap {
namespace {

// A site that gains at least this many blocks (and bytes) between the snapshots is called
// leaking or retained; a single new block is more likely a one-off allocation.
constexpr std::int64_t kMinLeakBlocks = 2;

std::string signed_count(std::int64_t v) { return fmt::format("{}{}", v > 0 ? "+" : "", v); }

std::string key_of(const Site& s) { return s.site + '\x1f' + s.function; }

std::optional<std::int64_t> last_profiler_step(const Snapshot& s) {
  std::optional<std::int64_t> best;
  for (const Annotation& a : s.annotations) {
    if (a.name.rfind("ProfilerStep#", 0) != 0) continue;
    const char* digits = a.name.c_str() + 13;
    char* end = nullptr;
    const long long n = std::strtoll(digits, &end, 10);
    if (end == digits) continue;
    if (!best || n > *best) best = n;
  }
  return best;
}

std::optional<std::int64_t> newest_time(const Snapshot& s) {
  std::optional<std::int64_t> t;
  for (const auto& d : s.device_traces) {
    for (auto it = d.events.rbegin(); it != d.events.rend(); ++it) {
      if (it->has_time) {
        if (!t || it->time_us > *t) t = it->time_us;
        break;
      }
    }
  }
  return t;
}

std::string device_list(const TotalsReport& t) {
  std::string out;
  for (const auto& d : t.devices) out += fmt::format("{}{}", out.empty() ? "" : ",", d.device);
  return out.empty() ? "none" : out;
}

// The later trace replays the earlier snapshot's moment when their windows overlap: its live
// bytes there must equal what the earlier snapshot held.
void check_trace_overlap(const LoadedSnapshot& before, const Analysis& ba, const LoadedSnapshot& after, const Analysis& aa,
                         std::vector<std::string>& warnings) {
  for (const DeviceTimeline& bt : ba.timelines) {
    const auto& bev = before.snapshot.device_traces[static_cast<std::size_t>(bt.device)].events;
    if (bev.empty() || !bev.back().has_time) continue;
    const std::int64_t t = bev.back().time_us;
    for (const DeviceTimeline& at : aa.timelines) {
      if (at.device != bt.device) continue;
      const auto& aev = after.snapshot.device_traces[static_cast<std::size_t>(at.device)].events;
      if (aev.empty() || !aev.front().has_time || !aev.back().has_time) continue;
      if (aev.front().time_us > t || aev.back().time_us < t) continue;
      const auto it = std::upper_bound(aev.begin(), aev.end(), t, [](std::int64_t v, const TraceEvent& e) { return v < e.time_us; });
      const std::int64_t replayed = at.curve[static_cast<std::size_t>(it - aev.begin())];
      const std::int64_t held = bt.end_live;
      const std::int64_t tol = std::max<std::int64_t>(static_cast<std::int64_t>(kMiB), std::abs(held) / 100);
      if (std::abs(replayed - held) > tol) {
        warnings.push_back(fmt::format("totals inconsistent with the trace: at the earlier snapshot's last event, the later trace "
                                       "replays {} live on device {}, but the earlier snapshot held {}; they are probably not from "
                                       "the same run",
                                       format_bytes(replayed), at.device, format_bytes(held)));
      }
    }
  }
}

// The warnings that the pair may not be from one run; `separate` names the evidence that it is
// two separate runs (different settings, devices or parameter memory).
// `before_sites`: the earlier analysis' sites with its paths rebased onto the later's (checkout_roots).
std::vector<std::string> pair_warnings(const LoadedSnapshot& before, const Analysis& ba, const std::vector<Site>& before_sites,
                                       const LoadedSnapshot& after, const Analysis& aa, std::string& separate) {
  std::vector<std::string> w;
  const std::string bd = device_list(ba.totals), ad = device_list(aa.totals);
  if (bd != ad) {
    w.push_back(fmt::format("the snapshots cover different devices ({} vs {}): they cannot be from the same process of one run", bd, ad));
    separate = fmt::format("they cover different devices ({} vs {})", bd, ad);
  }
  const auto& bs = before.snapshot.settings;
  const auto& as = after.snapshot.settings;
  if (bs.present && as.present && bs.conf != as.conf) {
    w.push_back(fmt::format("different allocator settings (PYTORCH_CUDA_ALLOC_CONF '{}' vs '{}'): not the same run", bs.conf, as.conf));
    separate = fmt::format("the allocator settings differ ('{}' vs '{}')", bs.conf, as.conf);
  }
  const auto tb = newest_time(before.snapshot), ta = newest_time(after.snapshot);
  if (tb && ta && *ta < *tb) {
    w.push_back("the later snapshot's newest trace event is older than the earlier one's: the arguments may be swapped "
                "(memsnap EARLY --diff LATER)");
  }
  check_trace_overlap(before, ba, after, aa, w);
  std::set<std::string> keys;
  std::size_t with_stack_before = 0, with_stack_after = 0, common = 0;
  for (const Site& s : before_sites) {
    if (s.no_stack) continue;
    keys.insert(key_of(s));
    ++with_stack_before;
  }
  for (const Site& s : aa.sites) {
    if (s.no_stack) continue;
    ++with_stack_after;
    common += keys.count(key_of(s));
  }
  if (with_stack_before && with_stack_after && common == 0) {
    w.push_back("no allocation site is common to both snapshots: they are probably from different programs");
  }
  std::uint64_t params_before = 0, params_after = 0;
  for (const Site& s : ba.sites) params_before += s.category == Category::Parameter ? s.bytes : 0;
  for (const Site& s : aa.sites) params_after += s.category == Category::Parameter ? s.bytes : 0;
  if (params_before && params_after && std::max(params_before, params_after) * 100 > std::min(params_before, params_after) * 101) {
    w.push_back(fmt::format("parameter memory differs ({} vs {}): a different model or configuration, probably not the same run",
                            format_bytes(static_cast<std::int64_t>(params_before)), format_bytes(static_cast<std::int64_t>(params_after))));
    separate = fmt::format("parameter memory differs ({} vs {})", format_bytes(static_cast<std::int64_t>(params_before)),
                           format_bytes(static_cast<std::int64_t>(params_after)));
  }
  if ((with_stack_before == 0) != (with_stack_after == 0)) {
    w.push_back("only one of the snapshots recorded stacks: sites cannot be matched, so the diff compares totals only");
  }
  return w;
}

void classify(std::vector<DiffSite>& sites, const Analysis& after) {
  auto grows = [](const DiffSite& d) { return !d.no_stack && d.delta_bytes > 0 && d.delta_blocks >= kMinLeakBlocks; };
  std::size_t activation = 0;
  for (const DiffSite& d : sites) activation += grows(d) && d.category == Category::Activation;
  for (DiffSite& d : sites) {
    if (!grows(d)) continue;
    for (const Pattern& p : after.patterns) {
      if ((is_leak_pattern(p.id) || p.id == PatternId::OptimizerStateSpike) && std::find(p.sites.begin(), p.sites.end(), d.site) != p.sites.end()) {
        d.pattern = p.id;
        break;
      }
    }
    if (!d.pattern) {
      if (d.category == Category::OptimizerState) d.pattern = PatternId::OptimizerStateSpike;
      else if (d.category == Category::Parameter) continue;
      else d.pattern = activation >= 2 ? PatternId::RetainedAutogradGraph : PatternId::GrowingContainer;
    }
    d.verdict = *d.pattern == PatternId::OptimizerStateSpike     ? DiffVerdict::Expected
                : *d.pattern == PatternId::RetainedAutogradGraph ? DiffVerdict::Retained
                                                                 : DiffVerdict::Leaking;
  }
}


std::string per_step(const DiffReport& d, const DiffSite& s) {
  if (!d.steps_between || *d.steps_between <= 0) return "";
  return fmt::format(", {:.3g} block(s) and {} per step", double(s.delta_blocks) / double(*d.steps_between),
                     format_bytes(s.delta_bytes / *d.steps_between));
}

Sentence grew_line(const DiffReport& d, const DiffSite& s) {
  return sentence("between the snapshots{} {} ({}, {}) grew from {} blocks, {} to {} blocks, {}{}", steps_phrase(d), s.site, s.function,
                  category_name(s.category), s.blocks_before, Bytes(s.bytes_before), s.blocks_after, Bytes(s.bytes_after), per_step(d, s));
}

std::vector<Pattern> diff_patterns(const DiffReport& d) {
  std::map<PatternId, Pattern> by_id;
  for (const DiffSite& s : d.sites) {
    if (!s.pattern) continue;
    auto [slot, fresh] = by_id.try_emplace(*s.pattern);
    Pattern& p = slot->second;
    if (fresh) {
      p.id = *s.pattern;
      p.confidence = Confidence::High;
      if (p.id == PatternId::GrowingContainer) {
        p.verdict = Verdict::Leak;
        p.summary = sentence("Between the snapshots{}, {} ({}) grew by {} blocks ({}) and kept them: a leak, as when tensors are "
                             "appended to a Python container",
                             steps_phrase(d), s.site, s.function, signed_count(s.delta_blocks), Bytes(s.delta_bytes, true));
        p.fix = {fix(FixId::AppendDetachCpu, s.site), fix(FixId::BoundContainer)};
      } else if (p.id == PatternId::RetainedAutogradGraph) {
        p.verdict = Verdict::Leak;
        p.summary = sentence("Between the snapshots{}, activation sites such as {} grew in both bytes and blocks: each step's "
                             "autograd graph is retained",
                             steps_phrase(d), s.site);
        p.fix = {fix(FixId::DetachNotGraph), fix(FixId::RetainGraphOrKept)};
      } else {
        p.verdict = Verdict::Expected;
        p.confidence = Confidence::Medium;
        p.summary = sentence("Between the snapshots optimizer state appeared or grew ({} at {}): the first optimizer.step() "
                             "allocates it; expected retention, not a leak",
                             Bytes(s.delta_bytes, true), s.site);
        p.fix = {fix(FixId::DumpAfterFirstStep)};
      }
    }
    if (p.sites.size() < 6) {
      p.sites.push_back(s.site);
      p.evidence.push_back(grew_line(d, s));
    }
  }
  std::vector<Pattern> out;
  for (PatternId id : {PatternId::RetainedAutogradGraph, PatternId::GrowingContainer, PatternId::OptimizerStateSpike}) {
    if (auto it = by_id.find(id); it != by_id.end()) out.push_back(std::move(it->second));
  }
  return out;
}

// The bytes by kind that one side's report gives: its peak device's peak budget, or every device's
// budget at the end; none when the analysis has no such budget.
std::optional<KindTotals> budget_kinds(const Analysis& a, bool at_peak) {
  if (at_peak) {
    const MemoryBudget* peak = peak_budget(a.budgets, a.peak_device);
    return peak ? std::optional(bytes_by_kind(*peak)) : std::nullopt;
  }
  std::optional<KindTotals> out;
  for (const MemoryBudget& b : a.budgets) {
    if (b.moment != BudgetMoment::End) continue;
    if (!out) out.emplace();
    const KindTotals kinds = bytes_by_kind(b);
    for (std::size_t c = 0; c < kinds.size(); ++c) (*out)[c] += kinds[c];
  }
  return out;
}

// Peak against peak, by site and by kind; the settings that differ; and whether the pair is two runs.
// `before_sites`, `before_peak_sites`: the earlier analysis' sites and sites at its peak, rebased
// onto the later's paths.
void compare_runs(const Snapshot& before, const Analysis& ba, const std::vector<Site>& before_sites,
                  const std::vector<Site>& before_peak_sites, const Snapshot& after, const Analysis& aa, const std::string& separate,
                  DiffReport& d) {
  d.peak_before = ba.totals.overall.peak_allocated;
  d.peak_after = aa.totals.overall.peak_allocated;
  d.kinds_at_peak = d.peak_before && d.peak_after;
  if (d.kinds_at_peak) d.peak_sites = diff_sites(before_peak_sites, aa.sites_at_peak);
  d.kinds = d.kinds_at_peak ? kind_deltas(before_peak_sites, aa.sites_at_peak, budget_kinds(ba, true), budget_kinds(aa, true))
                            : kind_deltas(before_sites, aa.sites, budget_kinds(ba, false), budget_kinds(aa, false));
  d.settings = setting_changes(before.settings, after.settings);
  auto stackless = [](const std::vector<Site>& sites) { return std::all_of(sites.begin(), sites.end(), [](const Site& s) { return s.no_stack; }); };
  d.stacks_on_neither = stackless(ba.sites) && stackless(aa.sites);
  if (!separate.empty()) {
    d.relation = DiffRelation::TwoRuns;
    d.relation_evidence = separate;
  } else if (!share_segment_addresses(before, after)) {
    d.relation = DiffRelation::TwoRuns;
    d.relation_evidence = same_opening(before, after)
                              ? "no segment address is common to both, so two processes, and both traces open with the same allocation sites: one script run twice"
                              : "no segment address is common to both: two processes";
  }
  if (d.relation == DiffRelation::TwoRuns) d.steps = step_aligned(ba.diagnosis.steps, ba.peak_device, aa.diagnosis.steps, aa.peak_device);
}

}  // namespace

std::string steps_phrase(const DiffReport& d) {
  if (d.steps_between) return fmt::format(" ({} steps apart)", *d.steps_between);
  if (d.seconds_between && *d.seconds_between > 0) return fmt::format(" ({:.1f} s apart)", *d.seconds_between);
  return "";
}

std::vector<DiffSite> diff_sites(const std::vector<Site>& before, const std::vector<Site>& after) {
  std::map<std::string, DiffSite> by_key;
  auto slot = [&](const Site& s) -> DiffSite& {
    DiffSite& d = by_key[key_of(s)];
    if (d.site.empty()) {
      d.site = s.site;
      d.file = s.file;
      d.line = s.line;
      d.function = s.function;
      d.category = s.category;
      d.no_stack = s.no_stack;
    }
    return d;
  };
  for (const Site& s : before) {
    DiffSite& d = slot(s);
    d.bytes_before += s.bytes;
    d.blocks_before += s.blocks;
  }
  for (const Site& s : after) {
    DiffSite& d = slot(s);
    d.bytes_after += s.bytes;
    d.blocks_after += s.blocks;
    d.category = s.category;
  }
  std::vector<DiffSite> out;
  out.reserve(by_key.size());
  for (auto& [key, d] : by_key) {
    d.delta_bytes = saturating_difference(d.bytes_before, d.bytes_after);
    d.delta_blocks = saturating_difference(d.blocks_before, d.blocks_after);
    if (d.blocks_before == 0 && d.blocks_after > 0) d.status = DiffStatus::New;
    else if (d.blocks_after == 0 && d.blocks_before > 0) d.status = DiffStatus::Removed;
    else if (d.delta_bytes > 0 || (d.delta_bytes == 0 && d.delta_blocks > 0)) d.status = DiffStatus::Grown;
    else if (d.delta_bytes < 0 || (d.delta_bytes == 0 && d.delta_blocks < 0)) d.status = DiffStatus::Shrunk;
    else d.status = DiffStatus::Same;
    out.push_back(std::move(d));
  }
  std::sort(out.begin(), out.end(), [](const DiffSite& a, const DiffSite& b) {
    if (a.delta_bytes != b.delta_bytes) return a.delta_bytes > b.delta_bytes;
    if (a.delta_blocks != b.delta_blocks) return a.delta_blocks > b.delta_blocks;
    return a.site != b.site ? a.site < b.site : a.function < b.function;
  });
  return out;
}

DiffReport diff_snapshots(const LoadedSnapshot& before, const Analysis& ba, const LoadedSnapshot& after, const Analysis& aa) {
  DiffReport d;
  d.before_path = before.input.path;
  d.after_path = after.input.path;
  d.before = ba.totals.overall;
  d.after = aa.totals.overall;
  d.roots = checkout_roots({&ba.sites, &ba.sites_at_peak}, {&aa.sites, &aa.sites_at_peak});
  const std::vector<Site> before_sites = rebased(ba.sites, d.roots);
  const std::vector<Site> before_peak_sites = rebased(ba.sites_at_peak, d.roots);
  d.sites = diff_sites(before_sites, aa.sites);  // with the categories both analyses settled
  const auto sb = last_profiler_step(before.snapshot), sa = last_profiler_step(after.snapshot);
  if (sb && sa && *sa > *sb) d.steps_between = *sa - *sb;
  const auto tb = newest_time(before.snapshot), ta = newest_time(after.snapshot);
  if (tb && ta) d.seconds_between = double(*ta - *tb) / 1e6;
  std::string separate;
  d.warnings = pair_warnings(before, ba, before_sites, after, aa, separate);
  compare_runs(before.snapshot, ba, before_sites, before_peak_sites, after.snapshot, aa, separate, d);
  // Growth between snapshots that may not belong together proves nothing: no verdicts then.
  if (d.warnings.empty() && d.relation == DiffRelation::OneRun) classify(d.sites, aa);
  d.patterns = diff_patterns(d);
  return d;
}

}  // namespace memsnap
