// The growth patterns, retained_autograd_graph and growing_container: sites whose live blocks grow
// from step boundary to step boundary (rules in patterns.h), and the Pattern each becomes.
#include <algorithm>
#include <cctype>
#include <fmt/format.h>

#include "analysis/patterns_internal.h"

namespace memsnap::patterns_detail {
namespace {

bool icontains(std::string_view s, std::string_view part) {
  auto it = std::search(s.begin(), s.end(), part.begin(), part.end(),
                        [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b)); });
  return it != s.end();
}

Sentence growth_line(const SiteGrowth& g) {
  return sentence("{} ({}, {}): {} -> {} blocks, {} -> {} at the step boundaries (+{:.3g} block(s), +{} per step)", g.site,
                  g.function, category_name(g.category), g.blocks_first, g.blocks_last, Bytes(g.bytes_first), Bytes(g.bytes_last),
                  g.blocks_per_step(), Bytes(g.bytes_per_step()));
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

// Live memory at the boundaries grows from the first to the last, or the site's share of it does.
bool grows_with_live_memory(const StepTable& table, const SiteSeries& ss) {
  const std::size_t nb = table.live.size();
  const std::int64_t first = table.live.front(), last = table.live[nb - 1];
  if (last > first) return true;
  // share_last > share_first, cross-multiplied: bytes_last * live_first > bytes_first * live_last
  return first > 0 && last > 0 &&
         static_cast<double>(ss.bytes[nb - 1]) * static_cast<double>(first) > static_cast<double>(ss.bytes[0]) * static_cast<double>(last);
}

}  // namespace

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
    if (!grows_with_live_memory(table, ss) || ss.kept - ss.blocks[0] < kMinGrowthBlocks) continue;
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
  for (const TraceEvent& e : s.events_of(r.device)) {
    if (e.action == Action::Alloc && category(e.stack) == Category::Gradient) {
      r.backward_in_window = true;
      break;
    }
  }
  return r;
}

Pattern retained_graph_pattern(const RetainedGraph& r, const Steps& st, const std::vector<std::int64_t>& live, std::size_t devices) {
  Pattern p;
  p.id = PatternId::RetainedAutogradGraph;
  p.verdict = Verdict::Leak;
  p.confidence = r.intervals >= 5 ? Confidence::High : Confidence::Medium;
  std::size_t act = 0;
  for (const auto& g : r.sites) act += g.category == Category::Activation;
  const std::string culprit = !r.accumulator_site.empty() ? r.accumulator_site : r.loss_site;
  p.summary = sentence("The autograd graph of every step stays alive: {} activation sites keep their blocks from step to step "
                       "(+{} per step over {} steps){}",
                       act, Bytes(r.bytes_per_step), r.intervals,
                          culprit.empty() ? "" : fmt::format(", held through the small per-step tensor at {}", culprit));
  p.evidence.push_back(steps_evidence(st, devices));
  if (live.size() >= 2) {
    p.evidence.push_back(sentence("live memory at the step boundaries grew from {} to {}", Bytes(live.front()), Bytes(live.back())));
  }
  for (std::size_t i = 0; i < r.sites.size() && i < 6; ++i) p.evidence.push_back(growth_line(r.sites[i]));
  if (!r.loss_site.empty()) {
    p.evidence.push_back(sentence("{} (the loss or output) keeps one set of tensors per step: the graph hangs off it", r.loss_site));
  }
  if (!r.accumulator_site.empty()) {
    p.evidence.push_back(sentence("{} re-allocates a small tensor every step and keeps only the newest: a running total "
                                  "(`total = total + loss`) that references every earlier step's graph",
                                     r.accumulator_site));
  }
  if (!r.backward_in_window) p.evidence.push_back(sentence("no backward pass (gradient allocation) in the trace window"));
  if (!r.accumulator_site.empty()) p.sites.push_back(r.accumulator_site);
  if (!r.loss_site.empty() && r.loss_site != r.accumulator_site) p.sites.push_back(r.loss_site);
  for (const auto& g : r.sites) {
    if (p.sites.size() >= 6) break;
    if (std::find(p.sites.begin(), p.sites.end(), g.site) == p.sites.end()) p.sites.push_back(g.site);
  }
  if (!r.accumulator_site.empty()) {
    p.fix.push_back(fix(FixId::AccumulateItem, r.accumulator_site));
  }
  p.fix.push_back(r.loss_site.empty() ? fix(FixId::DetachKept) : fix(FixId::DetachLossAt, r.loss_site));
  p.fix.push_back(fix(FixId::RetainGraphOrKept));
  if (!r.backward_in_window) p.fix.push_back(fix(FixId::NoGradForEval));
  if (r.bytes_per_step > 0) p.saving_bytes = static_cast<std::uint64_t>(r.bytes_per_step) * r.intervals;
  return p;
}

Pattern container_pattern(const std::vector<SiteGrowth>& sites, const Steps& st, std::size_t devices, const std::vector<Site>& live) {
  const SiteGrowth& g = sites.front();
  Pattern p;
  p.id = PatternId::GrowingContainer;
  p.verdict = Verdict::Leak;
  p.confidence = g.rises == g.intervals && g.intervals >= 5 ? Confidence::High : Confidence::Medium;
  p.summary = sentence("{} ({}) gains {:.3g} block(s) ({}) every step and never frees them: {} blocks, {} live at the last "
                       "step boundary, as when tensors are appended to a Python container",
                       g.site, g.function, g.blocks_per_step(), Bytes(g.bytes_per_step()), g.blocks_last, Bytes(g.bytes_last));
  p.evidence.push_back(steps_evidence(st, devices));
  for (std::size_t i = 0; i < sites.size() && i < 5; ++i) {
    p.evidence.push_back(growth_line(sites[i]));
    p.sites.push_back(sites[i].site);
  }
  p.evidence.push_back(sentence("the block count rose in {} of {} steps and never fell", g.rises, g.intervals));
  for (const Site& site : live) {
    if (site.site == g.site) {
      p.evidence.push_back(sentence("at the end of the snapshot {} holds {} blocks, {} live", g.site, site.blocks, Bytes(site.bytes)));
      break;
    }
  }
  p.fix.push_back(fix(FixId::AppendDetachCpu, g.site));
  p.fix.push_back(fix(FixId::BoundContainer));
  std::int64_t grown = 0;
  for (const SiteGrowth& site : sites) grown += std::max<std::int64_t>(site.bytes_last - site.bytes_first, 0);
  if (grown > 0) p.saving_bytes = static_cast<std::uint64_t>(grown);
  return p;
}

}  // namespace memsnap::patterns_detail
