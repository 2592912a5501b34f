// The memory-pressure patterns, optimizer_state_spike and activation_pressure: optimizer state
// allocated by the first optimizer.step() and flat afterwards, and activations live at the peak
// and freed in backward (rules in patterns.h), and the Pattern each becomes.
#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <unordered_map>

#include "analysis/patterns_internal.h"

namespace memsnap::patterns_detail {

// ---------------------------------------------------------- optimizer state

std::optional<OptimizerSpike> optimizer_spike(const Snapshot& s, const DeviceTimeline& t, const Lifetimes& lifetimes,
                                              SiteIndex& sites, const Measured& a) {
  const auto& events = s.events_of(t.device);
  OptimizerStacks is_opt(s);
  const auto runs = optimizer_runs(t, is_opt);
  OptimizerSpike o;
  o.device = t.device;
  for (const OomAnalysis& oom : a.ooms) o.oom |= oom.event.device == t.device && is_opt(oom.event.stack);
  std::uint64_t before = 0;
  std::map<std::size_t, std::uint64_t> by_site;
  for (const Lifetime& l : lifetimes) {
    if (l.alloc == kBeforeWindow && l.free != kStillLive && l.free_stack != kNoStack && is_opt(l.free_stack)) o.replaced_bytes += l.size;
    if (l.free != kStillLive || l.stack == kNoStack || !is_opt(l.stack)) continue;
    o.bytes += l.size;
    ++o.blocks;
    by_site[sites.of(l.stack)] += l.size;
    if (l.alloc == kBeforeWindow) {
      before += l.size;
      continue;
    }
    const auto r = std::upper_bound(runs.begin(), runs.end(), l.alloc, [](std::size_t k, const OptimizerRun& run) { return k < run.first; });
    (r - runs.begin() <= 1 ? o.first_step_bytes : o.later_bytes) += l.size;
  }
  std::size_t annotated = 0;
  for (const StepMark& m : t.steps) annotated += m.stage == "START" && m.name.rfind("Optimizer.step#", 0) == 0;
  o.optimizer_steps = std::max(runs.size(), annotated);
  o.reallocated = o.first_step_bytes > 0 && o.replaced_bytes * 2 >= o.first_step_bytes;
  o.first_step_in_window = before == 0 && o.first_step_bytes > 0 && !o.reallocated;
  const auto end_live = static_cast<std::uint64_t>(std::max<std::int64_t>(t.end_live, 0));
  o.percent_of_live = pct(double(o.bytes), double(end_live));
  if (!o.oom) {
    if (o.bytes < kMiB || (o.bytes * 100 < end_live * kOptimizerSharePercent && o.bytes < kGiB)) return std::nullopt;
    if (o.later_bytes * 100 > o.bytes * kLaterSharePercent) return std::nullopt;
    if (!o.first_step_in_window && !o.reallocated && o.optimizer_steps < 2) return std::nullopt;
  }
  if (!runs.empty()) {
    // After the step: past the run's last allocation and the frees of its temporaries.
    std::size_t k = runs.front().last + 1;
    while (k < events.size() && events[k].action != Action::Alloc &&
           (events[k].action != Action::FreeCompleted || events[k].stack == kNoStack || is_opt(events[k].stack))) {
      ++k;
    }
    o.live_before = t.curve[runs.front().first];
    o.live_after = t.curve[std::min(k, t.curve.size() - 1)];
  }
  std::uint64_t best = 0;
  for (const auto& [site, bytes] : by_site) {
    if (bytes > best && !sites[site].no_stack) {
      best = bytes;
      o.site = sites[site].site;
    }
  }
  return o;
}

Pattern optimizer_pattern(const OptimizerSpike& o) {
  Pattern p;
  p.id = PatternId::OptimizerStateSpike;
  p.verdict = Verdict::Expected;
  p.confidence = o.first_step_in_window || o.reallocated || o.oom ? Confidence::High : Confidence::Medium;
  const std::string where = o.site.empty() ? "" : " at " + o.site;
  if (o.oom) {
    p.summary = sentence("The OOM happened inside optimizer.step() while it allocated optimizer state ({} live in {} blocks{}): "
                         "optimizer memory that does not fit is expected retention, not a leak",
                         Bytes(o.bytes), o.blocks, where);
  } else if (o.first_step_in_window) {
    p.summary = sentence("{} of optimizer state ({:.0f}% of live memory, {} blocks{}) was allocated by the first "
                         "optimizer.step() and stays flat afterwards: expected retention, not a leak",
                         Bytes(o.bytes), o.percent_of_live, o.blocks, where);
  } else if (o.reallocated) {
    p.summary = sentence("{} of optimizer state ({:.0f}% of live memory, {} blocks{}) is re-allocated by every optimizer.step(): the "
                         "step frees the previous state ({}, allocated before the window) as it allocates the new one, so it is "
                         "steady, not a first-step spike; expected retention, not a leak",
                         Bytes(o.bytes), o.percent_of_live, o.blocks, where, Bytes(o.replaced_bytes));
  } else {
    p.summary = sentence("{} of optimizer state ({:.0f}% of live memory, {} blocks{}) predates the trace window and stays flat "
                         "over its {} optimizer steps: expected retention, not a leak",
                         Bytes(o.bytes), o.percent_of_live, o.blocks, where, o.optimizer_steps);
  }
  if (o.first_step_in_window) {
    p.evidence.push_back(sentence("the first optimizer.step() in the window allocated {} under torch/optim that stays live; live "
                                  "memory went from {} to {} across it",
                                  Bytes(o.first_step_bytes), Bytes(o.live_before), Bytes(o.live_after)));
  }
  if (o.reallocated) {
    p.evidence.push_back(sentence("the optimizer.step() in the window freed {} of optimizer memory allocated before the window and "
                                  "allocated {} that stays live; live memory went from {} to {} across it",
                                  Bytes(o.replaced_bytes), Bytes(o.first_step_bytes), Bytes(o.live_before), Bytes(o.live_after)));
  }
  p.evidence.push_back(sentence("{} optimizer.step() calls in the window; the later ones added {} of lasting state",
                                o.optimizer_steps, Bytes(o.later_bytes)));
  p.evidence.push_back(sentence("optimizer state live at the end: {} in {} blocks ({:.0f}% of live memory)", Bytes(o.bytes), o.blocks,
                                o.percent_of_live));
  if (o.oom) p.evidence.push_back(sentence("the failed allocation's stack is inside torch/optim (optimizer.step())"));
  if (!o.site.empty()) p.sites.push_back(o.site);
  if (!o.oom) p.fix.push_back(fix(FixId::OptimizerNothingToFix));
  p.fix.push_back(fix(FixId::OptimizerIfShort));
  return p;
}

namespace {

// ------------------------------------------------------------- activations

// Where modules are called along an activation's stack: each model-code frame (user or
// third-party) just outside a model-code `forward`, with its depth (frames from the outermost).
struct CallSite {
  std::string where;  // "file:line (function)"
  std::size_t depth;
};

std::vector<CallSite> module_call_sites(const Snapshot& s, StackId stack) {
  std::vector<CallSite> out;
  const FrameId* frames = s.stack_begin(stack);
  const std::size_t n = s.stack_size(stack);
  bool in_forward = false;
  for (std::size_t i = 0; i < n; ++i) {
    const Frame& f = s.frames[frames[i]];
    const FrameKind kind = classify_frame(s.str(f.filename), s.str(f.name));
    if (kind != FrameKind::User && kind != FrameKind::ThirdParty) continue;
    const std::string_view name = s.str(f.name);
    // Forward wrappers (accelerate's new_forward, hooks) sit between every module and its caller.
    if (name != "forward" && name.find("forward") != std::string_view::npos) continue;
    if (in_forward) {
      std::string where = fmt::format("{}:{} ({})", s.str(f.filename), f.line, name);
      if (std::none_of(out.begin(), out.end(), [&](const CallSite& c) { return c.where == where; })) out.push_back({std::move(where), n - i});
    }
    in_forward = name == "forward";
  }
  if (out.empty()) {
    const SiteChoice c = choose_site(s, stack);
    if (c.found) {
      const Frame& f = s.frames[c.frame];
      out.push_back({fmt::format("{}:{} ({})", s.str(f.filename), f.line, s.str(f.name)), 0});
    }
  }
  return out;
}

std::int64_t median_step_us(const Steps& st, const TraceEvents& events) {
  std::vector<std::int64_t> d;
  for (std::size_t j = 0; j + 1 < st.boundaries.size(); ++j) {
    const std::size_t a = st.boundaries[j], b = st.boundaries[j + 1];
    if (a < events.size() && b < events.size() && events[a].has_time && events[b].has_time) d.push_back(events[b].time_us - events[a].time_us);
  }
  if (d.empty()) return -1;
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  return d[d.size() / 2];
}

// The first event of a backward span (from stacks or the order of frees) holding or following
// the state after `p` events: backward allocations without frames still end the forward.
std::size_t first_backward_after(const DevicePhases& d, std::size_t p) {
  for (const PhaseSpan& sp : d.spans) {
    if (sp.phase == Phase::Backward && sp.end >= p) return std::max(sp.first, p);
  }
  return SIZE_MAX;
}

}  // namespace

std::optional<ActivationPressure> activation_pressure(const Snapshot& s, const DeviceTimeline& t, const Lifetimes& lifetimes,
                                                      const Steps& st, CategoryMemo& category, const DevicePhases* phases) {
  if (!t.peak_allocated || *t.peak_allocated <= 0) return std::nullopt;
  const auto& events = s.events_of(t.device);
  const std::size_t p = t.peak_index;
  // Backward begins at the first gradient allocation after the last activation allocation up to
  // the peak (the peak may fall early in backward, while activations are still being released).
  std::size_t from = p;
  for (std::size_t k = std::min(p, events.size()); k-- > 0;) {
    if (events[k].action == Action::Alloc && category(events[k].stack) == Category::Activation) {
      from = k + 1;
      break;
    }
  }
  std::size_t backward = SIZE_MAX;
  for (std::size_t k = from; k < events.size(); ++k) {
    if (events[k].action == Action::Alloc && category(events[k].stack) == Category::Gradient) {
      backward = k;
      break;
    }
  }
  if (backward == SIZE_MAX && phases) backward = first_backward_after(*phases, p);
  // No backward after the peak: not a training sawtooth, unless an OOM cut the forward short.
  const bool cut = backward == SIZE_MAX && phases && phases->peak && phases->peak->phase == Phase::Forward && !t.oom_events.empty() &&
                   t.oom_events.back() + 1 >= p;
  if (backward == SIZE_MAX && !cut) return std::nullopt;
  ActivationPressure a;
  a.device = t.device;
  a.peak = *t.peak_allocated;
  a.cut_by_oom = cut;
  std::map<std::string, std::pair<std::uint64_t, std::size_t>> modules;  // call site -> (bytes, deepest depth)
  std::unordered_map<StackId, std::vector<CallSite>> module_memo;
  std::size_t first_alloc = SIZE_MAX;
  for (const Lifetime& l : lifetimes) {
    if (!l.live_at(p) || l.stack == kNoStack || (!cut && (l.free == kStillLive || l.free < backward))) continue;
    if (category(l.stack) != Category::Activation) continue;
    a.freeable += l.size;
    ++a.tensors;
    auto it = module_memo.find(l.stack);
    if (it == module_memo.end()) it = module_memo.emplace(l.stack, module_call_sites(s, l.stack)).first;
    for (const CallSite& c : it->second) {
      auto& m = modules[c.where];
      m.first += l.size;
      m.second = std::max(m.second, c.depth);
    }
    if (l.alloc != kBeforeWindow) first_alloc = std::min<std::size_t>(first_alloc, l.alloc);
  }
  if (a.freeable < kMinFreeable || a.freeable * 100 < static_cast<std::uint64_t>(a.peak) * kActivationSharePercent) return std::nullopt;
  // The module to checkpoint: the deepest call site that still covers half the freeable bytes
  // (the loop over blocks, rather than the whole model or one small layer); then the others by bytes.
  std::vector<std::pair<std::string, std::pair<std::uint64_t, std::size_t>>> sorted(modules.begin(), modules.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) {
    return x.second.first != y.second.first ? x.second.first > y.second.first : x.first < y.first;
  });
  std::size_t best = 0;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].second.first * 2 >= a.freeable && sorted[i].second.second > sorted[best].second.second) best = i;
  }
  if (!sorted.empty()) a.modules.emplace_back(sorted[best].first, sorted[best].second.first);
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (i != best) a.modules.emplace_back(sorted[i].first, sorted[i].second.first);
  }
  if (first_alloc < events.size() && p > 0 && events[first_alloc].has_time && events[p - 1].has_time) {
    a.forward_us = events[p - 1].time_us - events[first_alloc].time_us;
  }
  if (st.found()) {
    a.steps = st.boundaries.size() - 1;
    a.step_us = median_step_us(st, events);
  }
  return a;
}

Pattern activation_pattern(const ActivationPressure& a, bool capacity_oom) {
  Pattern p;
  p.id = PatternId::ActivationPressure;
  p.verdict = capacity_oom ? Verdict::Problem : Verdict::Info;
  p.confidence = a.steps >= 2 ? Confidence::High : Confidence::Medium;
  const std::string top = a.modules.empty() ? std::string("the largest modules") : a.modules.front().first;
  if (a.cut_by_oom) {
    p.summary = sentence("The forward pass ran out of memory holding {} of activations ({:.0f}% of the {} live): tensors kept for a "
                         "backward that never ran; checkpointing the modules called at {} trades them for recompute",
                         Bytes(a.freeable), pct(double(a.freeable), double(a.peak)), Bytes(a.peak), top);
    p.evidence.push_back(sentence("at the OOM (device {}): {} activation tensors, {}, allocated in the forward and not freed; no "
                                  "backward pass ran in the window",
                                  a.device, a.tensors, Bytes(a.freeable)));
  } else {
    p.summary = sentence("Forward activations dominate the peak: {} ({:.0f}% of the {} peak) is live at the peak and freed in "
                         "backward (a sawtooth); checkpointing the modules called at {} trades that memory for recompute",
                         Bytes(a.freeable), pct(double(a.freeable), double(a.peak)), Bytes(a.peak), top);
    p.evidence.push_back(sentence("at the peak (device {}): {} activation tensors, {}, all freed after the backward pass began",
                                  a.device, a.tensors, Bytes(a.freeable)));
  }
  for (std::size_t i = 0; i < a.modules.size() && i < 4; ++i) {
    p.evidence.push_back(sentence("activations of modules called at {}: {}", a.modules[i].first, Bytes(a.modules[i].second)));
  }
  if (a.steps) p.evidence.push_back(sentence("{} steps in the window, each rising in forward and falling in backward", a.steps));
  if (a.forward_us >= 0) {
    p.evidence.push_back(sentence("the forward pass up to the peak took {:.1f} ms{}", a.forward_us / 1000.0,
                                  a.step_us > 0 ? fmt::format("; a step takes {:.1f} ms (median)", a.step_us / 1000.0) : ""));
  }
  for (std::size_t i = 0; i < a.modules.size() && i < 4; ++i) {
    const std::string& m = a.modules[i].first;
    p.sites.push_back(m.substr(0, m.find(" (")));
  }
  p.fix.push_back(fix(FixId::CheckpointModules, top, Bytes(a.freeable)));
  if (a.forward_us >= 0 && a.step_us > 0) {
    p.fix.push_back(fix(FixId::RecomputeCostOfStep, a.forward_us / 1000.0, pct(double(a.forward_us), double(a.step_us)), a.step_us / 1000.0));
  } else if (a.forward_us >= 0) {
    p.fix.push_back(fix(FixId::RecomputeCostMs, a.forward_us / 1000.0));
  } else {
    p.fix.push_back(fix(FixId::RecomputeCostTypical));
  }
  // Hugging Face's own modules (not a project's folder that happens to be named transformers/).
  if (path_has(top, "site-packages/transformers/") || path_has(top, "transformers/models/")) p.fix.push_back(fix(FixId::HfGradientCheckpointing));
  p.fix.push_back(fix(FixId::SmallerMicroBatch));
  p.saving_bytes = a.freeable;
  return p;
}

}  // namespace memsnap::patterns_detail
