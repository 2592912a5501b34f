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
#include "analysis/diagnosis.h"
#include "analysis/steps.h"

namespace memsnap {


ModelState model_state(const Snapshot& snapshot);

Diagnosis diagnose(const Snapshot& snapshot, const Measured& measured);

// The pattern for DDP replication found across ranks or in one snapshot.
Pattern replicated_gradients_pattern(const ModelState& state, std::size_t ranks, bool oom);


}  // namespace memsnap
