// The phases of each device's trace: forward, backward, optimizer step, zero_grad and evaluation
// (a forward with no backward anywhere on the device), from annotations when the run recorded
// them, else from the allocation and free stacks (module forward, the autograd engine and
// backward frames, torch/optim, zero_grad) and, where backward allocations carry no frames, from
// the order of frees (forward allocations released last-in first-out after the forward's last
// allocation). Also where the peak sits: its phase and its iteration.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/attribution.h"
#include "analysis/timeline.h"
#include "base/enum_names.h"
#include "model/snapshot.h"

namespace memsnap {

enum class Phase { Forward, Backward, OptimizerStep, ZeroGrad, Evaluation, Other };
template <>
struct EnumNames<Phase> {
  static constexpr std::array<std::string_view, 6> names = {"forward", "backward", "optimizer_step", "zero_grad", "evaluation", "other"};
};

// How a span's phase was decided.
enum class PhaseSource { Annotations, Stacks, FreeOrder };
template <>
struct EnumNames<PhaseSource> {
  static constexpr std::array<std::string_view, 3> names = {"annotations", "stacks", "free_order"};
};

// Events [first, end) of one phase; `iteration` counts the forward (or evaluation) passes begun
// at or before it (0: before the first one).
struct PhaseSpan {
  Phase phase = Phase::Other;
  PhaseSource source = PhaseSource::Stacks;
  std::size_t first = 0, end = 0;
  std::size_t iteration = 0;
  std::int64_t live_start = 0;  // live requested bytes before its first event
  std::int64_t live_max = 0;    // the most live in it
  std::int64_t start_us = 0, end_us = 0;  // times of its first and last event (0 if unknown)
};

// Where the device's peak sits.
struct PeakPhase {
  Phase phase = Phase::Other;
  std::size_t span = 0;       // index into DevicePhases::spans
  std::size_t iteration = 0;  // 1-based, of `iterations`
};

struct DevicePhases {
  std::int64_t device = 0;
  std::vector<PhaseSpan> spans;
  std::size_t iterations = 0;         // forward or evaluation passes begun in the window
  bool backward_from_frames = false;  // some allocation or free carries a backward frame
  bool backward_from_free_order = false;
  bool annotated = false;             // some span comes from annotations
  std::optional<PeakPhase> peak;
  bool has(Phase p) const;
  // The span holding the state after the first `index` events (the event index - 1), or null.
  const PhaseSpan* span_at(std::size_t index) const;
};

// The phase one stack shows (innermost decisive frame first), Other when none.
Phase phase_of_stack(const Snapshot& snapshot, StackId stack);

DevicePhases find_phases(const Snapshot& snapshot, const DeviceTimeline& timeline);
std::vector<DevicePhases> find_all_phases(const Snapshot& snapshot, const std::vector<DeviceTimeline>& timelines);

// "the backward pass of iteration 2 of 3": where the peak sits, or "" when the phases do not say.
std::string peak_place_text(const DevicePhases& phases);
// "backward (inferred from the order of frees)": a phase and, when not from stacks, its source.
std::string phase_label(const PhaseSpan& span);

// What is live at the peak by kind: the peak's sites summed by category, largest first.
std::vector<std::pair<Category, std::uint64_t>> live_by_kind(const std::vector<Site>& sites);

// Internal to phases.cpp, declared for its tests.
namespace phases_detail {
inline constexpr std::uint8_t kUnlabelled = 0xff;
// Backward passes without frames, from the order of frees: `phases` holds each event's Phase
// (as a byte) or kUnlabelled; gaps found to be backward passes are labelled Backward in it and
// marked in `inferred`.
void infer_backward_from_frees(std::vector<std::uint8_t>& phases, const Lifetimes& lifetimes, const TraceEvents& events,
                               std::vector<bool>& inferred);
}  // namespace phases_detail

}  // namespace memsnap
