// The patterns of what stays live between steps: reference_cycles (blocks of several steps freed
// together in bursts) and replicated_gradients (DDP model state, from model_state()), with the
// Pattern each becomes (rules in patterns.h).
#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <set>
#include <unordered_map>

#include "analysis/patterns_internal.h"

namespace memsnap {
namespace patterns_detail {

// --------------------------------------------------------- reference cycles

std::optional<ReferenceCycles> reference_cycles(const DeviceTimeline& timeline, const Steps& st,
                                                SiteIndex& sites) {
  const std::int64_t device = timeline.device;
  const auto& lifetimes = timeline.lifetimes;
  if (!st.found()) return std::nullopt;
  ReferenceCycles r;
  r.device = device;
  std::map<std::string, std::uint64_t> site_bytes;
  std::vector<std::size_t> run;
  std::vector<std::size_t> run_steps;
  const std::size_t peak_step = st.step_of(timeline.peak_index);
  // Whether the run's blocks were allocated in at least kBurstMinSteps different steps (the
  // blocks that count are a subset): most bursts free one step's temporaries and stop here.
  auto spans_enough_steps = [&] {
    run_steps.clear();
    for (std::size_t i : run) run_steps.push_back(st.step_of(lifetimes[i].alloc));
    std::sort(run_steps.begin(), run_steps.end());
    return static_cast<std::size_t>(std::unique(run_steps.begin(), run_steps.end()) - run_steps.begin()) >= kBurstMinSteps;
  };
  auto close_run = [&] {
    if (run.size() < kBurstMinBlocks || !spans_enough_steps()) {
      run.clear();
      return;
    }
    // Only sites whose freed blocks come from at least two steps count: the burst's ordinary
    // frees (temporaries of the current step) stay out.
    std::map<std::size_t, std::set<std::size_t>> steps_of_site;
    for (std::size_t i : run) steps_of_site[sites.of(lifetimes[i].stack)].insert(st.step_of(lifetimes[i].alloc));
    std::set<std::size_t> steps;
    std::uint64_t blocks = 0, bytes = 0, held = 0;
    for (std::size_t i : run) {
      const auto& site_steps = steps_of_site[sites.of(lifetimes[i].stack)];
      if (site_steps.size() < 2) continue;
      steps.insert(st.step_of(lifetimes[i].alloc));
      ++blocks;
      bytes += lifetimes[i].size;
      if (lifetimes[i].live_at(timeline.peak_index) && st.step_of(lifetimes[i].alloc) < peak_step) held += lifetimes[i].size;
    }
    if (blocks >= kBurstMinBlocks && steps.size() >= kBurstMinSteps) {
      ++r.bursts;
      r.blocks += blocks;
      r.bytes += bytes;
      r.held_at_peak += held;
      r.max_steps_spanned = std::max(r.max_steps_spanned, steps.size());
      for (std::size_t i : run) {
        const std::size_t site = sites.of(lifetimes[i].stack);
        if (steps_of_site[site].size() >= 2) site_bytes[sites[site].site] += lifetimes[i].size;
      }
    }
    run.clear();
  };
  const FreeBursts& bursts = timeline.free_bursts;
  for (std::size_t b = 0, begin = 0; b < bursts.ends.size(); begin = bursts.ends[b++]) {
    // Blocks allocated before a partial window have no step: they never count.
    run.clear();
    for (std::size_t i = begin; i < bursts.ends[b]; ++i) {
      if (lifetimes[bursts.lifetimes[i]].alloc != kBeforeWindow) run.push_back(bursts.lifetimes[i]);
    }
    close_run();
  }
  if (r.bursts < kMinBursts) return std::nullopt;
  r.sites.assign(site_bytes.begin(), site_bytes.end());
  std::sort(r.sites.begin(), r.sites.end(), [](const auto& x, const auto& y) { return x.second != y.second ? x.second > y.second : x.first < y.first; });
  return r;
}

Pattern cycles_pattern(const ReferenceCycles& r, const Steps& st, std::size_t devices) {
  Pattern p;
  p.id = PatternId::ReferenceCycles;
  p.verdict = Verdict::Problem;
  p.confidence = r.bursts >= 3 ? Confidence::High : Confidence::Medium;
  p.summary = sentence("Memory is freed in bursts: {} times, blocks allocated over as many as {} steps were freed together "
                       "({} blocks, {} in all), as when Python's garbage collector breaks reference cycles",
                       r.bursts, r.max_steps_spanned, r.blocks, Bytes(r.bytes));
  p.evidence.push_back(steps_evidence(st, devices));
  p.evidence.push_back(sentence("{} bursts of back-to-back frees, each releasing >= {} blocks allocated in >= {} different steps", r.bursts,
                                kBurstMinBlocks, kBurstMinSteps));
  for (std::size_t i = 0; i < r.sites.size() && i < 4; ++i) {
    p.evidence.push_back(sentence("{} of them were allocated at {}", Bytes(r.sites[i].second), r.sites[i].first));
    p.sites.push_back(r.sites[i].first);
  }
  p.fix.push_back(fix(FixId::WarnTensorCycles));
  p.fix.push_back(fix(FixId::BreakCycle, r.sites.empty() ? std::string("the sites above") : r.sites.front().first));
  p.fix.push_back(fix(FixId::GcCollect));
  if (r.held_at_peak > 0) {
    p.evidence.push_back(sentence("at the peak, {} of these blocks from earlier steps were still waiting for the collector", Bytes(r.held_at_peak)));
    p.saving_bytes = r.held_at_peak;
  }
  return p;
}

}  // namespace patterns_detail

using patterns_detail::pct;

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
  p.id = PatternId::ReplicatedGradients;
  p.verdict = oom ? Verdict::Problem : Verdict::Expected;
  p.confidence = ranks > 1 ? Confidence::High : Confidence::Medium;
  const double share = pct(double(m.total()), double(m.live));
  if (ranks > 1) {
    p.summary = sentence("Every one of the {} ranks holds full-size parameters, gradients and optimizer state ({}, {:.0f}% of live "
                         "memory): DDP replicates them; sharding them is the structural fix",
                         ranks, Bytes(m.total()), share);
  } else {
    p.summary = sentence("DDP keeps full-size parameters, gradients and optimizer state on every rank: {} ({:.0f}% of live memory) "
                         "on this one; sharding them is the structural fix",
                         Bytes(m.total()), share);
  }
  p.evidence.push_back(sentence("parameters {}, gradients {}, optimizer state {}, DDP gradient buckets {}", Bytes(m.parameters),
                                Bytes(m.gradients), Bytes(m.optimizer_state), Bytes(m.ddp_buckets)));
  if (m.ddp_frames) p.evidence.push_back(sentence("DDP frames (torch/nn/parallel/distributed.py) in the live stacks; no FSDP or ZeRO frames"));
  if (ranks > 1) p.evidence.push_back(sentence("the same sites and sizes on all {} ranks (within 2%)", ranks));
  p.fix.push_back(fix(FixId::ShardReplicated));
  if (ranks > 1 && m.optimizer_state) {
    p.fix.push_back(fix(FixId::ZeroOneSaving, Bytes(m.optimizer_state * (ranks - 1) / ranks), ranks));
  }
  if (ranks > 1) p.saving_bytes = m.total() * (ranks - 1) / ranks;
  return p;
}

}  // namespace memsnap
