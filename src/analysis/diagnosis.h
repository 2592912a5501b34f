// What the diagnosis stage measured for each named pattern: the numbers a finding is built from
// (for tests, the headline and the other stages), before they become typed Patterns.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/attribution.h"
#include "analysis/finding.h"
#include "analysis/steps.h"

namespace memsnap {

// The training steps found on one device (analysis/steps.h) and live memory at each boundary.
struct DeviceSteps {
  std::int64_t device = 0;
  StepSource source = StepSource::None;
  std::string marker;  // the annotation name, or the site whose allocation starts each step
  std::size_t boundaries = 0;
  std::vector<std::int64_t> live;     // live requested bytes at each boundary (when found)
  std::vector<std::int64_t> time_us;  // time at each boundary (0 if unknown)
  std::vector<std::int64_t> step_peak;  // the highest live bytes within each step (boundaries - 1)
};

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
  // Optimizer memory allocated before the window and freed by an optimizer.step() in it: the state
  // is re-allocated every step (a custom optimizer), not created by a first step.
  std::uint64_t replaced_bytes = 0;
  bool reallocated = false;
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
  // An OOM ended the forward before its backward ran: `freeable` is the activations live at the
  // OOM, kept for a backward that never came.
  bool cut_by_oom = false;
};

struct ReferenceCycles {
  std::int64_t device = 0;
  std::size_t bursts = 0;
  std::uint64_t blocks = 0, bytes = 0;  // freed by the qualifying bursts
  // Of those blocks, the bytes live at the device's peak that an earlier step allocated: what
  // freeing each step's objects at its end (no cycle) would take off the peak.
  std::uint64_t held_at_peak = 0;
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

struct Diagnosis {
  std::vector<DeviceSteps> steps;
  std::vector<SiteGrowth> growing;  // every site that grows with the steps
  std::optional<RetainedGraph> retained_graph;
  std::vector<SiteGrowth> containers;
  std::optional<OptimizerSpike> optimizer_spike;
  std::optional<ActivationPressure> activation;
  std::optional<ReferenceCycles> cycles;
  std::optional<ModelState> replication;
  std::vector<Pattern> patterns;          // in report order: leaks first
  std::vector<Sentence> uncertainties;  // "not enough steps to tell", per device
};

}  // namespace memsnap
