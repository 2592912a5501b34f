// Site-by-site comparison of two snapshots of one run, the leak verdicts it supports, and the
// checks that the pair belongs together.
#include "analysis/diff.h"

#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>
#include <map>
#include <set>

#include "analysis/patterns.h"
#include "analysis/steps.h"
#include "base/checked.h"
#include "base/format_bytes.h"

namespace memsnap {
namespace {

// A site that gains at least this many blocks (and bytes) between the snapshots is called
// leaking or retained; a single new block is more likely a one-off allocation.
constexpr std::int64_t kMinLeakBlocks = 2;
constexpr std::uint64_t kMiB = 1ull << 20;

std::string signed_bytes(std::int64_t v) {
  std::string out(v > 0 ? "+" : v < 0 ? "-" : "");
  out += format_bytes(v < 0 ? -v : v);
  return out;
}
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

std::vector<std::string> pair_warnings(const LoadedSnapshot& before, const Analysis& ba, const LoadedSnapshot& after,
                                       const Analysis& aa) {
  std::vector<std::string> w;
  const std::string bd = device_list(ba.totals), ad = device_list(aa.totals);
  if (bd != ad) {
    w.push_back(fmt::format("the snapshots cover different devices ({} vs {}): they cannot be from the same process of one run", bd, ad));
  }
  const auto& bs = before.snapshot.settings;
  const auto& as = after.snapshot.settings;
  if (bs.present && as.present && bs.conf != as.conf) {
    w.push_back(fmt::format("different allocator settings (PYTORCH_CUDA_ALLOC_CONF '{}' vs '{}'): not the same run", bs.conf, as.conf));
  }
  const auto tb = newest_time(before.snapshot), ta = newest_time(after.snapshot);
  if (tb && ta && *ta < *tb) {
    w.push_back("the later snapshot's newest trace event is older than the earlier one's: the arguments may be swapped "
                "(memsnap EARLY --diff LATER)");
  }
  check_trace_overlap(before, ba, after, aa, w);
  std::set<std::string> keys;
  std::size_t with_stack_before = 0, with_stack_after = 0, common = 0;
  for (const Site& s : ba.sites) {
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
      if ((is_leak_pattern(p.id) || p.id == "optimizer_state_spike") && std::find(p.sites.begin(), p.sites.end(), d.site) != p.sites.end()) {
        d.pattern = p.id;
        break;
      }
    }
    if (d.pattern.empty()) {
      if (d.category == Category::OptimizerState) d.pattern = "optimizer_state_spike";
      else if (d.category == Category::Parameter) continue;
      else d.pattern = activation >= 2 ? "retained_autograd_graph" : "growing_container";
    }
    d.verdict = d.pattern == "optimizer_state_spike" ? "expected" : d.pattern == "retained_autograd_graph" ? "retained" : "leaking";
  }
}

std::string steps_phrase(const DiffReport& d) {
  if (d.steps_between) return fmt::format(" ({} steps apart)", *d.steps_between);
  if (d.seconds_between && *d.seconds_between > 0) return fmt::format(" ({:.1f} s apart)", *d.seconds_between);
  return "";
}

std::string per_step(const DiffReport& d, const DiffSite& s) {
  if (!d.steps_between || *d.steps_between <= 0) return "";
  return fmt::format(", {:.3g} block(s) and {} per step", double(s.delta_blocks) / double(*d.steps_between),
                     format_bytes(s.delta_bytes / *d.steps_between));
}

std::string grew_line(const DiffReport& d, const DiffSite& s) {
  return fmt::format("between the snapshots{} {} ({}, {}) grew from {} blocks, {} to {} blocks, {}{}", steps_phrase(d), s.site,
                     s.function, category_name(s.category), s.blocks_before, format_bytes(static_cast<std::int64_t>(s.bytes_before)),
                     s.blocks_after, format_bytes(static_cast<std::int64_t>(s.bytes_after)), per_step(d, s));
}

std::vector<Pattern> diff_patterns(const DiffReport& d) {
  std::map<std::string, Pattern> by_id;
  for (const DiffSite& s : d.sites) {
    if (s.pattern.empty()) continue;
    Pattern& p = by_id[s.pattern];
    if (p.id.empty()) {
      p.id = s.pattern;
      p.confidence = "high";
      if (s.pattern == "growing_container") {
        p.verdict = "leak";
        p.summary = fmt::format("Between the snapshots{}, {} ({}) grew by {} blocks ({}) and kept them: a leak, as when tensors are "
                                "appended to a Python container",
                                steps_phrase(d), s.site, s.function, signed_count(s.delta_blocks), signed_bytes(s.delta_bytes));
        p.fix = {fmt::format("at {}: append tensor.detach().cpu() (or .item() for a scalar) instead of the CUDA tensor", s.site),
                 "or bound the container (collections.deque(maxlen=N)) or clear it every N steps"};
      } else if (s.pattern == "retained_autograd_graph") {
        p.verdict = "leak";
        p.summary = fmt::format("Between the snapshots{}, activation sites such as {} grew in both bytes and blocks: each step's "
                                "autograd graph is retained",
                                steps_phrase(d), s.site);
        p.fix = {"detach before logging or keeping: store loss.detach() or loss.item(), not tensors that carry the graph",
                 "look for backward(retain_graph=True) and for outputs or losses kept in lists or on self across steps"};
      } else {
        p.verdict = "expected";
        p.confidence = "medium";
        p.summary = fmt::format("Between the snapshots optimizer state appeared or grew ({} at {}): the first optimizer.step() "
                                "allocates it; expected retention, not a leak",
                                signed_bytes(s.delta_bytes), s.site);
        p.fix = {"nothing to fix: dump the earlier snapshot after the first optimizer.step() so optimizer state is in both"};
      }
    }
    if (p.sites.size() < 6) {
      p.sites.push_back(s.site);
      p.evidence.push_back(grew_line(d, s));
    }
  }
  std::vector<Pattern> out;
  for (const char* id : {"retained_autograd_graph", "growing_container", "optimizer_state_spike"}) {
    if (auto it = by_id.find(id); it != by_id.end()) out.push_back(std::move(it->second));
  }
  return out;
}

std::string diff_headline(const DiffReport& d) {
  const std::int64_t live = saturating_difference(d.before.allocated, d.after.allocated);
  const std::string change = fmt::format("live memory {} {} (to {})", live >= 0 ? "grew by" : "shrank by", format_bytes(live < 0 ? -live : live),
                                         format_bytes(static_cast<std::int64_t>(d.after.allocated)));
  const DiffSite* top = nullptr;
  for (const DiffSite& s : d.sites) {
    if (s.delta_bytes > 0) {
      top = &s;
      break;
    }
  }
  if (!top) {
    return fmt::format("Between the two snapshots{} {}; no allocation site grew, so nothing leaks between them.", steps_phrase(d), change);
  }
  std::string tail;
  if (!top->verdict.empty()) tail = fmt::format(": {} ({})", top->verdict, top->pattern);
  const bool any_leak = std::any_of(d.sites.begin(), d.sites.end(), [](const DiffSite& s) { return s.verdict == "leaking" || s.verdict == "retained"; });
  if (!d.warnings.empty()) tail += "; no leak verdict, because the pair may not be from one run: " + d.warnings.front();
  else if (!any_leak) tail += "; no site grew in both bytes and blocks enough to call it a leak";
  return fmt::format("Between the two snapshots{} {}; the site that grew most is {} ({}): {} in {} blocks{}.", steps_phrase(d), change,
                     top->site, top->function.empty() ? "no function" : top->function, signed_bytes(top->delta_bytes),
                     signed_count(top->delta_blocks), tail);
}

}  // namespace

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
    if (d.blocks_before == 0 && d.blocks_after > 0) d.status = "new";
    else if (d.blocks_after == 0 && d.blocks_before > 0) d.status = "removed";
    else if (d.delta_bytes > 0 || (d.delta_bytes == 0 && d.delta_blocks > 0)) d.status = "grown";
    else if (d.delta_bytes < 0 || (d.delta_bytes == 0 && d.delta_blocks < 0)) d.status = "shrunk";
    else d.status = "same";
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
  // Categories as the diagnosis sees them (a closure run inside optimizer.step() is not state).
  auto recategorized = [](const Snapshot& s, std::vector<Site> sites) {
    for (Site& site : sites) {
      if (!site.no_stack && site.example_stack != kNoStack) site.category = categorize_stack(s, site.example_stack);
    }
    return sites;
  };
  d.sites = diff_sites(recategorized(before.snapshot, ba.sites), recategorized(after.snapshot, aa.sites));
  const auto sb = last_profiler_step(before.snapshot), sa = last_profiler_step(after.snapshot);
  if (sb && sa && *sa > *sb) d.steps_between = *sa - *sb;
  const auto tb = newest_time(before.snapshot), ta = newest_time(after.snapshot);
  if (tb && ta) d.seconds_between = double(*ta - *tb) / 1e6;
  d.warnings = pair_warnings(before, ba, after, aa);
  // Growth between snapshots that may not belong together proves nothing: no verdicts then.
  if (d.warnings.empty()) classify(d.sites, aa);
  d.patterns = diff_patterns(d);
  d.headline = diff_headline(d);
  return d;
}

void apply_diff(const DiffReport& d, Analysis& a) {
  a.headline = d.headline;
  std::vector<std::string> steps;
  for (const Pattern& dp : d.patterns) {
    for (const auto& f : dp.fix) steps.push_back(fmt::format("[{}] {}", dp.id, f));
    auto it = std::find_if(a.patterns.begin(), a.patterns.end(), [&](const Pattern& p) { return p.id == dp.id; });
    if (it == a.patterns.end()) {
      a.patterns.insert(a.patterns.begin(), dp);
      continue;
    }
    it->evidence.insert(it->evidence.begin(), dp.evidence.begin(), dp.evidence.end());
    for (auto s = dp.sites.rbegin(); s != dp.sites.rend(); ++s) {
      if (std::find(it->sites.begin(), it->sites.end(), *s) == it->sites.end()) it->sites.insert(it->sites.begin(), *s);
    }
    if (dp.verdict == "leak") it->confidence = "high";
  }
  // The diff's own fixes first, without repeating lines the single-snapshot findings already give.
  std::vector<std::string> rest;
  for (auto& s : a.next_steps) {
    if (std::find(steps.begin(), steps.end(), s) == steps.end()) rest.push_back(std::move(s));
  }
  rest.erase(std::remove_if(rest.begin(), rest.end(), [](const std::string& s) { return s.find("--diff") != std::string::npos; }), rest.end());
  steps.insert(steps.end(), rest.begin(), rest.end());
  a.next_steps = std::move(steps);
  for (auto w = d.warnings.rbegin(); w != d.warnings.rend(); ++w) a.uncertainties.insert(a.uncertainties.begin(), "diff: " + *w);
}

}  // namespace memsnap
