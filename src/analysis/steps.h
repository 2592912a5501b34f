// Training steps in a device's trace, and what each allocation site holds at every step boundary.
//
// Steps come from external_annotations when the run recorded them (ProfilerStep#N,
// Optimizer.step#..., Optimizer.zero_grad#..., DataLoader iteration, step-like record_function
// regions), else from the trace itself: recurring runs of torch/optim allocations, or the period
// of the allocation-stack sequence (not when the repeating unit runs inside one pass: one module
// call, one autograd backward or one optimizer.step(); the layers of one forward or backward pass
// are not steps). A boundary is an event index: the state before that event,
// at the same point of every step, so live memory at boundaries can be compared step to step.
// Allocation lifetimes come from the timeline (timeline.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/enum_names.h"
#include "analysis/attribution.h"
#include "analysis/timeline.h"
#include "model/snapshot.h"

namespace memsnap {

// Allocation sites as attribution names them (innermost user frame, ...), resolved once per stack.
// A site as attribution names it (the byte and block fields stay zero here).
using StepSite = Site;

class SiteIndex {
 public:
  explicit SiteIndex(const Snapshot& snapshot) : snapshot_(snapshot), cache_(snapshot) {}
  std::size_t of(StackId stack);
  const StepSite& operator[](std::size_t i) const { return sites_[i]; }
  std::size_t size() const { return sites_.size(); }

 private:
  const Snapshot& snapshot_;
  SiteCache cache_;                      // each stack's chosen frame and description
  std::vector<std::uint32_t> by_stack_;  // stack id -> site + 1 (0: not resolved yet); stack ids are dense
  std::unordered_map<std::uint64_t, std::size_t> by_frame_;  // SiteCache::key -> site
  std::vector<StepSite> sites_;
};

enum class StepSource { None, ProfilerStep, OptimizerStep, ZeroGrad, DataLoader, UserRegion, OptimizerTrace, Period };
template <>
struct EnumNames<StepSource> {
  static constexpr std::array<std::string_view, 8> names = {"none",
                                                            "ProfilerStep annotations",
                                                            "Optimizer.step annotations",
                                                            "Optimizer.zero_grad annotations",
                                                            "DataLoader iteration annotations",
                                                            "record_function annotations",
                                                            "recurring optimizer allocations in the trace",
                                                            "the period of the allocation sequence"};
};
inline const char* step_source_name(StepSource source) { return name_of(source).data(); }

struct Steps {
  std::int64_t device = 0;
  StepSource source = StepSource::None;
  std::string marker;                   // the annotation name, or the site whose allocation starts each step
  std::vector<std::size_t> boundaries;  // event indices, strictly ascending; at least 3 when found
  // When fewer than kMinBoundaries marks were found: the best source and how many marks it had
  // (the window holds too few steps to tell growth from a step's own rise and fall).
  StepSource too_few_source = StepSource::None;
  std::size_t too_few_marks = 0;
  bool found() const { return boundaries.size() >= 3; }
  // Only inferred from a repeating allocation pattern, with nothing in the trace naming a step.
  bool inferred() const { return source == StepSource::Period; }
  // The step an event belongs to: the number of boundaries at or before it.
  std::size_t step_of(std::size_t event_index) const;
};

// Minimum boundaries for a step sequence, and for the growth rules (intervals = boundaries - 1).
inline constexpr std::size_t kMinBoundaries = 3;

Steps find_steps(const Snapshot& snapshot, const DeviceTimeline& timeline);

// True when the path contains part, with forward slashes or with backslashes (no allocation).
bool path_has(std::string_view file, std::string_view part);

// True for the optimizer's own allocations: the innermost torch/optim frame is not zero_grad and
// no module call or backward lies inside it (a closure given to optimizer.step() is not).
bool is_optimizer_stack(const Snapshot& snapshot, StackId stack);

// is_optimizer_stack() remembered per stack id. Not thread-safe: one per thread.
class OptimizerStacks {
 public:
  explicit OptimizerStacks(const Snapshot& snapshot) : snapshot_(snapshot), known_(snapshot.stack_count(), kUnknown) {}
  bool operator()(StackId stack);

 private:
  static constexpr std::int8_t kUnknown = -1;
  const Snapshot& snapshot_;
  std::vector<std::int8_t> known_;  // by stack id: kUnknown, 0 or 1
};

// Runs of allocations under torch/optim, each one optimizer.step(): a run ends when at least
// three other allocations follow. From the window's allocations in the timeline's lifetimes.
struct OptimizerRun {
  std::size_t first = 0, last = 0;  // event indices of its first and last optimizer allocation
};
std::vector<OptimizerRun> optimizer_runs(const DeviceTimeline& timeline, OptimizerStacks& is_optimizer);

// Live bytes and blocks of one site at every boundary.
struct SiteSeries {
  std::size_t site = 0;
  std::vector<std::int64_t> bytes;
  std::vector<std::int64_t> blocks;
  std::vector<std::uint32_t> allocs;  // allocations per interval (boundary i .. i+1)
  std::int64_t min_block = 0;         // smallest allocation of the site in the window
  std::int64_t kept = 0;              // blocks live at the last boundary and never freed in the window
};

struct StepTable {
  Steps steps;
  std::vector<std::int64_t> live;     // live requested bytes at each boundary
  std::vector<std::int64_t> time_us;  // time of the event at each boundary (0 if unknown)
  std::vector<std::int64_t> step_peak;  // the highest live bytes within each step (boundaries - 1)
  std::vector<SiteSeries> series;     // sites live at some boundary or allocated between them
};

StepTable step_table(const Snapshot& snapshot, const DeviceTimeline& timeline, const Lifetimes& lifetimes,
                     Steps steps, SiteIndex& sites);

}  // namespace memsnap
