// The named leak and retention patterns: the rules in patterns.h, applied per device to the
// allocation lifetimes and the per-site series at step boundaries.
#include "analysis/patterns.h"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <map>
#include <set>
#include <unordered_map>

#include "base/format_bytes.h"

namespace memsnap {
namespace {

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kGiB = 1ull << 30;

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
constexpr std::size_t kBurstMinBlocks = 6;
constexpr std::size_t kBurstMinSteps = 3;
constexpr std::size_t kMinBursts = 2;
// replicated_gradients
constexpr std::size_t kModelStateSharePercent = 50;
constexpr std::uint64_t kMinModelState = 512 * kMiB;

std::string B(std::int64_t v) { return format_bytes(v); }
std::string B(std::uint64_t v) { return format_bytes(static_cast<std::int64_t>(v)); }

double pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0; }

bool path_has(std::string_view file, std::string_view part) {
  if (file.find(part) != std::string_view::npos) return true;
  std::string alt(part);
  std::replace(alt.begin(), alt.end(), '/', '\\');
  return file.find(alt) != std::string_view::npos;
}

bool icontains(std::string_view s, std::string_view part) {
  auto it = std::search(s.begin(), s.end(), part.begin(), part.end(),
                        [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b)); });
  return it != s.end();
}

const std::vector<TraceEvent>& events_of(const Snapshot& s, std::int64_t device) {
  static const std::vector<TraceEvent> kNone;
  if (device < 0 || static_cast<std::size_t>(device) >= s.device_traces.size()) return kNone;
  return s.device_traces[static_cast<std::size_t>(device)].events;
}

class CategoryMemo {
 public:
  explicit CategoryMemo(const Snapshot& s) : s_(s) {}
  Category operator()(StackId stack) {
    auto it = memo_.find(stack);
    if (it == memo_.end()) it = memo_.emplace(stack, categorize_stack(s_, stack)).first;
    return it->second;
  }

 private:
  const Snapshot& s_;
  std::unordered_map<StackId, Category> memo_;
};

std::string steps_evidence(const Steps& st, std::size_t devices) {
  return fmt::format("steps from {}{}: {} step boundaries{}", step_source_name(st.source),
                     st.marker.empty() ? "" : " (" + st.marker + ")", st.boundaries.size(),
                     devices > 1 ? fmt::format(" on device {}", st.device) : "");
}

std::string growth_line(const SiteGrowth& g) {
  return fmt::format("{} ({}, {}): {} -> {} blocks, {} -> {} at the step boundaries (+{:.3g} block(s), +{} per step)", g.site,
                     g.function, category_name(g.category), g.blocks_first, g.blocks_last, B(g.bytes_first), B(g.bytes_last),
                     g.blocks_per_step(), B(g.bytes_per_step()));
}

// ------------------------------------------------------------------ growth

std::vector<SiteGrowth> growing_sites(const StepTable& table, const SiteIndex& sites, std::int64_t device) {
  std::vector<SiteGrowth> out;
  const std::size_t nb = table.steps.boundaries.size();
  if (nb < kMinIntervals + 1) return out;
  const std::size_t ni = nb - 1;
  for (const SiteSeries& ss : table.series) {
    const StepSite& site = sites[ss.site];
    if (site.no_stack || site.category == Category::Parameter || site.category == Category::OptimizerState) continue;
    std::size_t rises = 0, falls = 0;
    for (std::size_t j = 0; j + 1 < nb; ++j) {
      rises += ss.blocks[j + 1] > ss.blocks[j];
      falls += ss.blocks[j + 1] < ss.blocks[j];
    }
    if (falls || rises < kMinIntervals || rises * 100 < ni * kRisePercent) continue;
    if (ss.blocks[nb - 1] - ss.blocks[0] < kMinGrowthBlocks || ss.bytes[nb - 1] <= ss.bytes[0]) continue;
    SiteGrowth g;
    g.device = device;
    g.site = site.site;
    g.function = site.function;
    g.category = site.category;
    g.kind = site.kind;
    g.blocks_first = ss.blocks[0];
    g.blocks_last = ss.blocks[nb - 1];
    g.bytes_first = ss.bytes[0];
    g.bytes_last = ss.bytes[nb - 1];
    g.intervals = ni;
    g.rises = rises;
    g.min_block = ss.min_block;
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end(), [](const SiteGrowth& a, const SiteGrowth& b) {
    const auto ga = a.bytes_last - a.bytes_first, gb = b.bytes_last - b.bytes_first;
    return ga != gb ? ga > gb : a.site < b.site;
  });
  return out;
}

bool has_loss_frame(const Snapshot& s, StackId stack) {
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    const Frame& f = s.frames[frames[i]];
    if (path_has(s.str(f.filename), "torch/nn/modules/loss.py") || icontains(s.str(f.name), "loss") ||
        icontains(s.str(f.name), "cross_entropy")) {
      return true;
    }
  }
  return false;
}

// A small tensor re-allocated every step while the previous one is freed, one always live at the
// boundaries: `total = total + loss` keeps the newest total and, through it, every step's graph.
std::string accumulator_site(const StepTable& table, const SiteIndex& sites) {
  const std::size_t nb = table.steps.boundaries.size();
  std::string best;
  std::int64_t best_size = 0;
  for (const SiteSeries& ss : table.series) {
    const StepSite& site = sites[ss.site];
    if (site.no_stack || site.kind != FrameKind::User || ss.min_block == 0 || ss.min_block > kSmallTensor) continue;
    bool constant = true;
    for (std::size_t j = 1; j < nb; ++j) constant &= ss.blocks[j] == ss.blocks[1] && ss.blocks[j] >= 1;
    std::size_t with_alloc = 0;
    for (auto n : ss.allocs) with_alloc += n > 0;
    if (!constant || with_alloc * 100 < ss.allocs.size() * kRisePercent) continue;
    if (best.empty() || ss.min_block < best_size) {
      best = site.site;
      best_size = ss.min_block;
    }
  }
  return best;
}

std::optional<RetainedGraph> retained_graph(const Snapshot& s, const std::vector<SiteGrowth>& growing, const StepTable& table,
                                            SiteIndex& sites, CategoryMemo& category) {
  std::int64_t total = 0, act = 0;
  std::size_t act_sites = 0;
  for (const SiteGrowth& g : growing) {
    total += g.bytes_last - g.bytes_first;
    if (g.category == Category::Activation) {
      act += g.bytes_last - g.bytes_first;
      ++act_sites;
    }
  }
  if (act_sites < 2 || act * 2 < total) return std::nullopt;
  RetainedGraph r;
  r.device = table.steps.device;
  r.sites = growing;
  r.intervals = growing.front().intervals;
  for (const SiteGrowth& g : growing) r.bytes_per_step += g.bytes_per_step();
  // The loss or output kept per step: a loss frame first, else the smallest scalar-sized tensor.
  std::int64_t smallest = 0;
  for (const SiteSeries& ss : table.series) {
    const StepSite& site = sites[ss.site];
    if (std::none_of(growing.begin(), growing.end(), [&](const SiteGrowth& g) { return g.site == site.site; })) continue;
    if (site.example_stack != kNoStack && has_loss_frame(s, site.example_stack)) {
      r.loss_site = site.site;
      break;
    }
    if (ss.min_block > 0 && ss.min_block <= kSmallTensor && (smallest == 0 || ss.min_block < smallest)) {
      smallest = ss.min_block;
      r.loss_site = site.site;
    }
  }
  r.accumulator_site = accumulator_site(table, sites);
  for (const TraceEvent& e : events_of(s, r.device)) {
    if (e.action == Action::Alloc && category(e.stack) == Category::Gradient) {
      r.backward_in_window = true;
      break;
    }
  }
  return r;
}

Pattern retained_graph_pattern(const RetainedGraph& r, const Steps& st, const std::vector<std::int64_t>& live, std::size_t devices) {
  Pattern p;
  p.id = "retained_autograd_graph";
  p.verdict = "leak";
  p.confidence = r.intervals >= 5 ? "high" : "medium";
  std::size_t act = 0;
  for (const auto& g : r.sites) act += g.category == Category::Activation;
  const std::string culprit = !r.accumulator_site.empty() ? r.accumulator_site : r.loss_site;
  p.summary = fmt::format("The autograd graph of every step stays alive: {} activation sites keep their blocks from step to step "
                          "(+{} per step over {} steps){}",
                          act, B(r.bytes_per_step), r.intervals,
                          culprit.empty() ? "" : fmt::format(", held through the small per-step tensor at {}", culprit));
  p.evidence.push_back(steps_evidence(st, devices));
  if (live.size() >= 2) {
    p.evidence.push_back(fmt::format("live memory at the step boundaries grew from {} to {}", B(live.front()), B(live.back())));
  }
  for (std::size_t i = 0; i < r.sites.size() && i < 6; ++i) p.evidence.push_back(growth_line(r.sites[i]));
  if (!r.loss_site.empty()) {
    p.evidence.push_back(fmt::format("{} (the loss or output) keeps one set of tensors per step: the graph hangs off it", r.loss_site));
  }
  if (!r.accumulator_site.empty()) {
    p.evidence.push_back(fmt::format("{} re-allocates a small tensor every step and keeps only the newest: a running total "
                                     "(`total = total + loss`) that references every earlier step's graph",
                                     r.accumulator_site));
  }
  if (!r.backward_in_window) p.evidence.push_back("no backward pass (gradient allocation) in the trace window");
  if (!r.accumulator_site.empty()) p.sites.push_back(r.accumulator_site);
  if (!r.loss_site.empty() && r.loss_site != r.accumulator_site) p.sites.push_back(r.loss_site);
  for (const auto& g : r.sites) {
    if (p.sites.size() >= 6) break;
    if (std::find(p.sites.begin(), p.sites.end(), g.site) == p.sites.end()) p.sites.push_back(g.site);
  }
  if (!r.accumulator_site.empty()) {
    p.fix.push_back(fmt::format("at {}: accumulate loss.item() (or loss.detach()) instead of the tensor, e.g. `total += loss.item()`",
                                r.accumulator_site));
  }
  p.fix.push_back(fmt::format("detach before logging or keeping: store loss.detach() or loss.item(){}",
                              r.loss_site.empty() ? " rather than tensors that carry the graph"
                                                  : " rather than the tensor computed at " + r.loss_site));
  p.fix.push_back("look for backward(retain_graph=True) and for outputs or losses kept in lists or on self across steps");
  if (!r.backward_in_window) {
    p.fix.push_back("no backward ran in this window: if this is evaluation, run it under torch.no_grad() or torch.inference_mode()");
  }
  return p;
}

Pattern container_pattern(const std::vector<SiteGrowth>& sites, const Steps& st, std::size_t devices, const std::vector<Site>& live) {
  const SiteGrowth& g = sites.front();
  Pattern p;
  p.id = "growing_container";
  p.verdict = "leak";
  p.confidence = g.rises == g.intervals && g.intervals >= 5 ? "high" : "medium";
  p.summary = fmt::format("{} ({}) gains {:.3g} block(s) ({}) every step and never frees them: {} blocks, {} live at the last "
                          "step boundary, as when tensors are appended to a Python container",
                          g.site, g.function, g.blocks_per_step(), B(g.bytes_per_step()), g.blocks_last, B(g.bytes_last));
  p.evidence.push_back(steps_evidence(st, devices));
  for (std::size_t i = 0; i < sites.size() && i < 5; ++i) {
    p.evidence.push_back(growth_line(sites[i]));
    p.sites.push_back(sites[i].site);
  }
  p.evidence.push_back(fmt::format("the block count rose in {} of {} steps and never fell", g.rises, g.intervals));
  for (const Site& site : live) {
    if (site.site == g.site) {
      p.evidence.push_back(fmt::format("at the end of the snapshot {} holds {} blocks, {} live", g.site, site.blocks, B(site.bytes)));
      break;
    }
  }
  p.fix.push_back(fmt::format("at {}: append tensor.detach().cpu() (or .item() for a scalar) instead of the CUDA tensor", g.site));
  p.fix.push_back("or bound the container (collections.deque(maxlen=N)) or clear it every N steps");
  return p;
}

// ---------------------------------------------------------- optimizer state

struct OptimizerRun {
  std::size_t first = 0, last = 0;  // event indices of its first and last optimizer allocation
};

std::vector<OptimizerRun> optimizer_runs(const Snapshot& s, const std::vector<TraceEvent>& events,
                                         std::unordered_map<StackId, bool>& memo) {
  std::vector<OptimizerRun> runs;
  std::size_t others = 0;
  bool in_run = false;
  for (std::size_t k = 0; k < events.size(); ++k) {
    if (events[k].action != Action::Alloc) continue;
    auto it = memo.find(events[k].stack);
    if (it == memo.end()) it = memo.emplace(events[k].stack, is_optimizer_stack(s, events[k].stack)).first;
    if (it->second) {
      if (!in_run) runs.push_back({k, k});
      runs.back().last = k;
      in_run = true;
      others = 0;
    } else if (in_run && ++others >= 3) {
      in_run = false;
    }
  }
  return runs;
}

std::optional<OptimizerSpike> optimizer_spike(const Snapshot& s, const DeviceTimeline& t, const std::vector<Lifetime>& lifetimes,
                                              SiteIndex& sites, const Analysis& a) {
  const auto& events = events_of(s, t.device);
  std::unordered_map<StackId, bool> memo;
  auto is_opt = [&](StackId stack) {
    auto it = memo.find(stack);
    if (it == memo.end()) it = memo.emplace(stack, is_optimizer_stack(s, stack)).first;
    return it->second;
  };
  const auto runs = optimizer_runs(s, events, memo);
  OptimizerSpike o;
  o.device = t.device;
  for (const OomAnalysis& oom : a.ooms) o.oom |= oom.event.device == t.device && is_opt(oom.event.stack);
  std::uint64_t before = 0;
  std::map<std::size_t, std::uint64_t> by_site;
  for (const Lifetime& l : lifetimes) {
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
  o.first_step_in_window = before == 0 && o.first_step_bytes > 0;
  const auto end_live = static_cast<std::uint64_t>(std::max<std::int64_t>(t.end_live, 0));
  o.percent_of_live = pct(double(o.bytes), double(end_live));
  if (!o.oom) {
    if (o.bytes < kMiB || (o.bytes * 100 < end_live * kOptimizerSharePercent && o.bytes < kGiB)) return std::nullopt;
    if (o.later_bytes * 100 > o.bytes * kLaterSharePercent) return std::nullopt;
    if (!o.first_step_in_window && o.optimizer_steps < 2) return std::nullopt;
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
  p.id = "optimizer_state_spike";
  p.verdict = "expected";
  p.confidence = o.first_step_in_window || o.oom ? "high" : "medium";
  const std::string where = o.site.empty() ? "" : " at " + o.site;
  if (o.oom) {
    p.summary = fmt::format("The OOM happened inside optimizer.step() while it allocated optimizer state ({} live in {} blocks{}): "
                            "optimizer memory that does not fit is expected retention, not a leak",
                            B(o.bytes), o.blocks, where);
  } else if (o.first_step_in_window) {
    p.summary = fmt::format("{} of optimizer state ({:.0f}% of live memory, {} blocks{}) was allocated by the first "
                            "optimizer.step() and stays flat afterwards: expected retention, not a leak",
                            B(o.bytes), o.percent_of_live, o.blocks, where);
  } else {
    p.summary = fmt::format("{} of optimizer state ({:.0f}% of live memory, {} blocks{}) predates the trace window and stays flat "
                            "over its {} optimizer steps: expected retention, not a leak",
                            B(o.bytes), o.percent_of_live, o.blocks, where, o.optimizer_steps);
  }
  if (o.first_step_in_window) {
    p.evidence.push_back(fmt::format("the first optimizer.step() in the window allocated {} under torch/optim that stays live; live "
                                     "memory went from {} to {} across it",
                                     B(o.first_step_bytes), B(o.live_before), B(o.live_after)));
  }
  p.evidence.push_back(fmt::format("{} optimizer.step() calls in the window; the later ones added {} of lasting state",
                                   o.optimizer_steps, B(o.later_bytes)));
  p.evidence.push_back(fmt::format("optimizer state live at the end: {} in {} blocks ({:.0f}% of live memory)", B(o.bytes), o.blocks,
                                   o.percent_of_live));
  if (o.oom) p.evidence.push_back("the failed allocation's stack is inside torch/optim (optimizer.step())");
  if (!o.site.empty()) p.sites.push_back(o.site);
  if (!o.oom) p.fix.push_back("nothing to fix: optimizer state lives as long as the optimizer; act only if memory is short");
  p.fix.push_back("if memory is short: a smaller model or batch, a leaner optimizer (SGD with momentum, Adafactor, 8-bit AdamW), "
                  "or shard the optimizer state (ZeRO-1 / FSDP / ZeroRedundancyOptimizer); this is not a leak to hunt");
  return p;
}

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

std::int64_t median_step_us(const Steps& st, const std::vector<TraceEvent>& events) {
  std::vector<std::int64_t> d;
  for (std::size_t j = 0; j + 1 < st.boundaries.size(); ++j) {
    const std::size_t a = st.boundaries[j], b = st.boundaries[j + 1];
    if (a < events.size() && b < events.size() && events[a].has_time && events[b].has_time) d.push_back(events[b].time_us - events[a].time_us);
  }
  if (d.empty()) return -1;
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  return d[d.size() / 2];
}

std::optional<ActivationPressure> activation_pressure(const Snapshot& s, const DeviceTimeline& t, const std::vector<Lifetime>& lifetimes,
                                                      const Steps& st, CategoryMemo& category) {
  if (!t.peak_allocated || *t.peak_allocated <= 0) return std::nullopt;
  const auto& events = events_of(s, t.device);
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
  if (backward == SIZE_MAX) return std::nullopt;  // no backward after the peak: not a training sawtooth
  ActivationPressure a;
  a.device = t.device;
  a.peak = *t.peak_allocated;
  std::map<std::string, std::pair<std::uint64_t, std::size_t>> modules;  // call site -> (bytes, deepest depth)
  std::unordered_map<StackId, std::vector<CallSite>> module_memo;
  std::size_t first_alloc = SIZE_MAX;
  for (const Lifetime& l : lifetimes) {
    if (!l.live_at(p) || l.stack == kNoStack || l.free == kStillLive || l.free < backward) continue;
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
    if (l.alloc != kBeforeWindow) first_alloc = std::min(first_alloc, l.alloc);
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
  p.id = "activation_pressure";
  p.verdict = capacity_oom ? "problem" : "info";
  p.confidence = a.steps >= 2 ? "high" : "medium";
  const std::string top = a.modules.empty() ? std::string("the largest modules") : a.modules.front().first;
  p.summary = fmt::format("Forward activations dominate the peak: {} ({:.0f}% of the {} peak) is live at the peak and freed in "
                          "backward (a sawtooth); checkpointing the modules called at {} trades that memory for recompute",
                          B(a.freeable), pct(double(a.freeable), double(a.peak)), B(a.peak), top);
  p.evidence.push_back(fmt::format("at the peak (device {}): {} activation tensors, {}, all freed after the backward pass began",
                                   a.device, a.tensors, B(a.freeable)));
  for (std::size_t i = 0; i < a.modules.size() && i < 4; ++i) {
    p.evidence.push_back(fmt::format("activations of modules called at {}: {}", a.modules[i].first, B(a.modules[i].second)));
  }
  if (a.steps) p.evidence.push_back(fmt::format("{} steps in the window, each rising in forward and falling in backward", a.steps));
  if (a.forward_us >= 0) {
    p.evidence.push_back(fmt::format("the forward pass up to the peak took {:.1f} ms{}", a.forward_us / 1000.0,
                                     a.step_us > 0 ? fmt::format("; a step takes {:.1f} ms (median)", a.step_us / 1000.0) : ""));
  }
  for (std::size_t i = 0; i < a.modules.size() && i < 4; ++i) {
    const std::string& m = a.modules[i].first;
    p.sites.push_back(m.substr(0, m.find(" (")));
  }
  p.fix.push_back(fmt::format("wrap the modules called at {} in torch.utils.checkpoint.checkpoint(module, x, use_reentrant=False): "
                              "up to {} of activations need not stay live until backward",
                              top, B(a.freeable)));
  if (a.forward_us >= 0 && a.step_us > 0) {
    p.fix.push_back(fmt::format("recompute cost: one extra forward of the checkpointed modules in backward, at most ~{:.1f} ms per "
                                "step (~{:.0f}% of the {:.1f} ms step)",
                                a.forward_us / 1000.0, pct(double(a.forward_us), double(a.step_us)), a.step_us / 1000.0));
  } else if (a.forward_us >= 0) {
    p.fix.push_back(fmt::format("recompute cost: one extra forward of the checkpointed modules in backward, at most ~{:.1f} ms per step",
                                a.forward_us / 1000.0));
  } else {
    p.fix.push_back("recompute cost: one extra forward of the checkpointed modules in backward (typically +20-35% step time)");
  }
  if (top.find("/transformers/") != std::string::npos) {
    p.fix.push_back("for a Hugging Face model, model.gradient_checkpointing_enable() checkpoints each decoder layer");
  }
  p.fix.push_back("or a smaller micro-batch with gradient accumulation, or bf16 autocast to halve activation bytes");
  return p;
}

// --------------------------------------------------------- reference cycles

std::optional<ReferenceCycles> reference_cycles(const Snapshot& s, std::int64_t device, const std::vector<Lifetime>& lifetimes,
                                                const Steps& st, SiteIndex& sites) {
  if (!st.found()) return std::nullopt;
  const auto& events = events_of(s, device);
  std::vector<std::size_t> by_free(events.size(), SIZE_MAX);
  for (std::size_t i = 0; i < lifetimes.size(); ++i) {
    const Lifetime& l = lifetimes[i];
    if (l.free != kStillLive && l.alloc != kBeforeWindow && l.free < events.size()) by_free[l.free] = i;
  }
  ReferenceCycles r;
  r.device = device;
  std::map<std::string, std::uint64_t> site_bytes;
  std::vector<std::size_t> run;
  auto close_run = [&] {
    if (run.size() < kBurstMinBlocks) {
      run.clear();
      return;
    }
    // Only sites whose freed blocks come from at least two steps count: the burst's ordinary
    // frees (temporaries of the current step) stay out.
    std::map<std::size_t, std::set<std::size_t>> steps_of_site;
    for (std::size_t i : run) steps_of_site[sites.of(lifetimes[i].stack)].insert(st.step_of(lifetimes[i].alloc));
    std::set<std::size_t> steps;
    std::uint64_t blocks = 0, bytes = 0;
    for (std::size_t i : run) {
      const auto& site_steps = steps_of_site[sites.of(lifetimes[i].stack)];
      if (site_steps.size() < 2) continue;
      steps.insert(st.step_of(lifetimes[i].alloc));
      ++blocks;
      bytes += lifetimes[i].size;
    }
    if (blocks >= kBurstMinBlocks && steps.size() >= kBurstMinSteps) {
      ++r.bursts;
      r.blocks += blocks;
      r.bytes += bytes;
      r.max_steps_spanned = std::max(r.max_steps_spanned, steps.size());
      for (std::size_t i : run) {
        const std::size_t site = sites.of(lifetimes[i].stack);
        if (steps_of_site[site].size() >= 2) site_bytes[sites[site].site] += lifetimes[i].size;
      }
    }
    run.clear();
  };
  for (std::size_t k = 0; k < events.size(); ++k) {
    if (events[k].action == Action::Alloc) close_run();
    else if (events[k].action == Action::FreeCompleted && by_free[k] != SIZE_MAX) run.push_back(by_free[k]);
  }
  close_run();
  if (r.bursts < kMinBursts) return std::nullopt;
  r.sites.assign(site_bytes.begin(), site_bytes.end());
  std::sort(r.sites.begin(), r.sites.end(), [](const auto& x, const auto& y) { return x.second != y.second ? x.second > y.second : x.first < y.first; });
  return r;
}

Pattern cycles_pattern(const ReferenceCycles& r, const Steps& st, std::size_t devices) {
  Pattern p;
  p.id = "reference_cycles";
  p.verdict = "problem";
  p.confidence = r.bursts >= 3 ? "high" : "medium";
  p.summary = fmt::format("Memory is freed in bursts: {} times, blocks allocated over as many as {} steps were freed together "
                          "({} blocks, {} in all), as when Python's garbage collector breaks reference cycles",
                          r.bursts, r.max_steps_spanned, r.blocks, B(r.bytes));
  p.evidence.push_back(steps_evidence(st, devices));
  p.evidence.push_back(fmt::format("{} bursts of back-to-back frees, each releasing >= {} blocks allocated in >= {} different steps", r.bursts,
                                   kBurstMinBlocks, kBurstMinSteps));
  for (std::size_t i = 0; i < r.sites.size() && i < 4; ++i) {
    p.evidence.push_back(fmt::format("{} of them were allocated at {}", B(r.sites[i].second), r.sites[i].first));
    p.sites.push_back(r.sites[i].first);
  }
  p.fix.push_back("call `from torch.utils.viz._cycles import warn_tensor_cycles; warn_tensor_cycles()` at start-up: it reports each "
                  "reference cycle that keeps a CUDA tensor alive");
  p.fix.push_back(fmt::format("break the cycle that holds the tensors allocated at {} (an object that references itself, a hook or "
                              "closure capturing self, a kept exception or traceback), or del the reference at the end of the step",
                              r.sites.empty() ? std::string("the sites above") : r.sites.front().first));
  p.fix.push_back("as a stopgap, gc.collect() after each step frees them sooner");
  return p;
}

}  // namespace

// -------------------------------------------------------------- model state

ModelState model_state(const Snapshot& s) {
  ModelState m;
  enum Kind { kOther, kParam, kGrad, kOpt, kDdp };
  std::unordered_map<StackId, Kind> memo;
  auto kind_of = [&](StackId stack) {
    auto it = memo.find(stack);
    if (it != memo.end()) return it->second;
    Kind k = kOther;
    const FrameId* frames = s.stack_begin(stack);
    for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
      const Frame& f = s.frames[frames[i]];
      const std::string_view file = s.str(f.filename), name = s.str(f.name);
      if (path_has(file, "torch/nn/parallel/distributed.py") || name.find("c10d::Reducer") != std::string_view::npos) {
        k = kDdp;
        m.ddp_frames = true;
      }
      if (path_has(file, "torch/distributed/fsdp") || path_has(file, "torch/distributed/_composable/fsdp") ||
          path_has(file, "zero_redundancy_optimizer.py") || path_has(file, "deepspeed/") || name.find("FlatParam") != std::string_view::npos) {
        m.sharded_frames = true;
      }
    }
    if (k == kOther) {
      switch (categorize_stack(s, stack)) {
        case Category::Parameter: k = kParam; break;
        case Category::Gradient: k = kGrad; break;
        case Category::OptimizerState: k = kOpt; break;
        default: break;
      }
    }
    memo.emplace(stack, k);
    return k;
  };
  for (const Block& b : s.blocks) {
    if (b.state != BlockState::ActiveAllocated) continue;
    m.live += b.size;
    switch (kind_of(b.stack)) {
      case kParam: m.parameters += b.size; break;
      case kGrad: m.gradients += b.size; break;
      case kOpt: m.optimizer_state += b.size; break;
      case kDdp: m.ddp_buckets += b.size; break;
      case kOther: break;
    }
  }
  return m;
}

Pattern replicated_gradients_pattern(const ModelState& m, std::size_t ranks, bool oom) {
  Pattern p;
  p.id = "replicated_gradients";
  p.verdict = oom ? "problem" : "expected";
  p.confidence = ranks > 1 ? "high" : "medium";
  const double share = pct(double(m.total()), double(m.live));
  if (ranks > 1) {
    p.summary = fmt::format("Every one of the {} ranks holds full-size parameters, gradients and optimizer state ({}, {:.0f}% of live "
                            "memory): DDP replicates them; sharding them is the structural fix",
                            ranks, B(m.total()), share);
  } else {
    p.summary = fmt::format("DDP keeps full-size parameters, gradients and optimizer state on every rank: {} ({:.0f}% of live memory) "
                            "on this one; sharding them is the structural fix",
                            B(m.total()), share);
  }
  p.evidence.push_back(fmt::format("parameters {}, gradients {}, optimizer state {}, DDP gradient buckets {}", B(m.parameters),
                                   B(m.gradients), B(m.optimizer_state), B(m.ddp_buckets)));
  if (m.ddp_frames) p.evidence.push_back("DDP frames (torch/nn/parallel/distributed.py) in the live stacks; no FSDP or ZeRO frames");
  if (ranks > 1) p.evidence.push_back(fmt::format("the same sites and sizes on all {} ranks (within 2%)", ranks));
  p.fix.push_back("shard them with FSDP (torch.distributed.fsdp.fully_shard) or ZeRO (DeepSpeed stage 1-3): each rank then holds about "
                  "1/N of parameters, gradients and optimizer state");
  if (ranks > 1 && m.optimizer_state) {
    p.fix.push_back(fmt::format("ZeRO-1 alone (torch.distributed.optim.ZeroRedundancyOptimizer) saves about {} per rank with {} ranks",
                                B(m.optimizer_state * (ranks - 1) / ranks), ranks));
  }
  return p;
}

Diagnosis diagnose(const Snapshot& s, const Analysis& a) {
  Diagnosis d;
  SiteIndex sites(s);
  CategoryMemo category(s);
  const std::size_t devices = a.timelines.size();
  bool capacity_oom = false;
  for (const OomAnalysis& o : a.ooms) capacity_oom |= o.verdict == OomVerdict::Capacity;
  std::vector<Pattern> leaks, others;
  for (const DeviceTimeline& t : a.timelines) {
    const auto lifetimes = build_lifetimes(s, t.device);
    Steps st = find_steps(s, t);
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
      if (!d.cycles) {
        if (auto r = reference_cycles(s, t.device, lifetimes, st, sites)) {
          others.push_back(cycles_pattern(*r, st, devices));
          d.cycles = std::move(r);
        }
      }
    }
    if (auto o = optimizer_spike(s, t, lifetimes, sites, a); o && (!d.optimizer_spike || o->bytes > d.optimizer_spike->bytes)) {
      d.optimizer_spike = std::move(o);
    }
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
