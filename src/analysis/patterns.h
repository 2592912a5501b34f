// The named leak and retention patterns of the workflow, decided from the snapshot's evidence:
// retained_autograd_graph, growing_container, optimizer_state_spike, activation_pressure,
// replicated_gradients and reference_cycles. Each finding keeps its numbers (for tests and other
// stages) and becomes a Pattern with evidence, the sites to change and the fix.
//
// Rules (thresholds are named constants in patterns_internal.h and documented in docs/report-schema.md):
// - growth: a site's live block count at step boundaries never falls, rises in >= 75% of at least
//   3 intervals, by >= 3 blocks in all, and its bytes grow; live memory (or the site's share of it)
//   grows with it, and the blocks gained are still live at the end of the window (gradients the
//   next backward frees or overwrites are not). Blocks from before the window only ever count as
//   a constant or a fall. Growing activation sites (>= 2, and >= half the growth) are a retained
//   autograd graph; other growing sites are containers. Over steps only inferred from a period,
//   leak-type patterns are at most medium confidence; with fewer than 3 complete steps in the
//   window there is no leak verdict, only a "not enough steps to tell" uncertainty.
// - optimizer_state_spike: torch/optim allocations still live, allocated in the first
//   optimizer.step() run of the window (or before it), >= 10% of live memory (or >= 1 GiB), and
//   later steps add <= 5% of it; or an OOM inside optimizer.step().
// - activation_pressure: at the peak, activation blocks freed after backward began (the first
//   gradient allocation after the last activation allocation up to the peak) make up >= 50% of
//   the peak and >= 256 MiB.
// - reference_cycles: >= 2 bursts of back-to-back frees (no allocation between them), each
//   freeing >= 6 blocks allocated in >= 3 different steps (counting only sites that lose blocks
//   of two or more steps in the burst, so the current step's temporaries stay out).
// - replicated_gradients: DDP frames (torch/nn/parallel/distributed.py), no sharding frames, and
//   parameters + gradients + optimizer state + DDP buckets >= 50% of live memory (>= 512 MiB).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/analyze.h"
#include "analysis/steps.h"

namespace memsnap {


struct SiteGrowth {
  std::int64_t device = 0;
  std::string site;  // file:line
  std::string function;
  Category category = Category::Unknown;
  FrameKind kind = FrameKind::Native;
  std::int64_t blocks_first = 0, blocks_last = 0;  // at the first and last boundary
  std::int64_t bytes_first = 0, bytes_last = 0;
  std::size_t intervals = 0;  // boundaries - 1
  std::size_t rises = 0;      // intervals in which the block count rose
  std::int64_t min_block = 0;  // smallest allocation of the site inside the steps
  double blocks_per_step() const { return intervals ? double(blocks_last - blocks_first) / double(intervals) : 0; }
  std::int64_t bytes_per_step() const { return intervals ? (bytes_last - bytes_first) / std::int64_t(intervals) : 0; }
};

struct RetainedGraph {
  std::int64_t device = 0;
  std::vector<SiteGrowth> sites;  // growing sites of the graph, largest growth first
  std::string loss_site;          // the small tensor kept per step (loss/output), if any
  std::string accumulator_site;   // a small tensor re-allocated every step, newest kept (total = total + loss)
  std::int64_t bytes_per_step = 0;
  std::size_t intervals = 0;
  bool backward_in_window = false;
};

struct OptimizerSpike {
  std::int64_t device = 0;
  std::string site;                  // user site of the optimizer state
  std::uint64_t bytes = 0;           // optimizer state live at the end
  std::uint64_t blocks = 0;
  std::uint64_t first_step_bytes = 0;  // allocated in the first optimizer.step() of the window
  std::uint64_t later_bytes = 0;       // allocated by later steps (flat: <= 5%)
  std::size_t optimizer_steps = 0;     // seen in the window
  bool first_step_in_window = false;
  bool oom = false;                    // an OOM inside optimizer.step()
  std::int64_t live_before = 0, live_after = 0;  // around the first step
  double percent_of_live = 0;
};

struct ActivationPressure {
  std::int64_t device = 0;
  std::int64_t peak = 0;
  std::uint64_t freeable = 0;  // activation bytes live at the peak and freed in backward
  std::size_t tensors = 0;
  std::vector<std::pair<std::string, std::uint64_t>> modules;  // module call sites, largest first
  std::int64_t forward_us = -1;  // first of those allocations to the peak
  std::int64_t step_us = -1;     // median step time
  std::size_t steps = 0;
};

struct ReferenceCycles {
  std::int64_t device = 0;
  std::size_t bursts = 0;
  std::uint64_t blocks = 0, bytes = 0;  // freed by the qualifying bursts
  std::size_t max_steps_spanned = 0;
  std::vector<std::pair<std::string, std::uint64_t>> sites;  // allocation sites of those blocks
};

// Parameters, gradients and optimizer state live at the end (rounded block bytes).
struct ModelState {
  std::uint64_t parameters = 0, gradients = 0, optimizer_state = 0, ddp_buckets = 0, live = 0;
  bool ddp_frames = false;      // torch/nn/parallel/distributed.py in a live stack
  bool sharded_frames = false;  // FSDP / ZeRO frames
  std::uint64_t total() const { return parameters + gradients + optimizer_state + ddp_buckets; }
};
ModelState model_state(const Snapshot& snapshot);

struct Diagnosis {
  std::vector<DeviceSteps> steps;
  std::vector<SiteGrowth> growing;  // every site that grows with the steps
  std::optional<RetainedGraph> retained_graph;
  std::vector<SiteGrowth> containers;
  std::optional<OptimizerSpike> optimizer_spike;
  std::optional<ActivationPressure> activation;
  std::optional<ReferenceCycles> cycles;
  std::optional<ModelState> replication;
  std::vector<Pattern> patterns;
  std::vector<std::string> uncertainties;  // "not enough steps to tell", per device
};

Diagnosis diagnose(const Snapshot& snapshot, const Analysis& analysis);

// Appends the diagnosis' patterns to analysis.patterns (called by derive_findings).
void add_diagnosis_patterns(const Snapshot& snapshot, Analysis& analysis);

// The pattern for DDP replication found across ranks or in one snapshot.
Pattern replicated_gradients_pattern(const ModelState& state, std::size_t ranks, bool oom);

inline bool is_leak_pattern(const std::string& id) { return id == "retained_autograd_graph" || id == "growing_container"; }

}  // namespace memsnap
