// Step boundaries from annotations or the trace, allocation lifetimes, and per-site series.
#include "analysis/steps.h"
#include "base/checked.h"
#include "base/units.h"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <map>
#include <span>

namespace memsnap {
namespace {

// Step sequences longer than this are thinned evenly (first and last kept), so the per-site
// series stay small on runs with thousands of steps.
constexpr std::size_t kMaxBoundaries = 256;

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// 1 = strongest evidence of a step; 0 = not a step marker.
int annotation_priority(std::string_view name) {
  if (starts_with(name, "ProfilerStep#")) return 1;
  if (starts_with(name, "Optimizer.step#")) return 2;
  if (starts_with(name, "Optimizer.zero_grad#")) return 3;
  if (starts_with(name, "enumerate(DataLoader)#")) return 4;
  const std::string l = ascii_lower(name);
  for (std::string_view noise : {"dynamo", "compile", "benchmark", "autotune", "zero_grad"}) {
    if (l.find(noise) != std::string::npos) return 0;
  }
  for (std::string_view word : {"step", "iter", "batch"}) {
    if (l.find(word) != std::string::npos) return 5;
  }
  return 0;
}

StepSource source_of_priority(int p) {
  switch (p) {
    case 1: return StepSource::ProfilerStep;
    case 2: return StepSource::OptimizerStep;
    case 3: return StepSource::ZeroGrad;
    case 4: return StepSource::DataLoader;
    default: return StepSource::UserRegion;
  }
}

std::vector<std::size_t> unique_sorted(std::vector<std::size_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// A mark older than the window's first event (a ring that overflowed, --max-trace-events): the
// state it names is not in the window, so it is no step boundary.
bool before_window(const StepMark& m, const TraceEvents& events) {
  return m.event_index == 0 && !events.empty() && events[0].has_time && m.time_us < events[0].time_us;
}

// The user_defined entries of 2024 nightlies (PR #129072, before external_annotations): a
// record_function START/END as a fake frame {"name": START/END, "filename": label}, at the
// entry's own place in the trace.
std::vector<StepMark> user_defined_marks(const Snapshot& s, const DeviceTimeline& t, const TraceEvents& events) {
  std::vector<StepMark> marks;
  if (t.actions[static_cast<std::size_t>(Action::UserDefined)] == 0) return marks;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (e.action != Action::UserDefined || s.stack_size(e.stack) == 0) continue;
    const Frame& f = s.frames[*s.stack_begin(e.stack)];
    marks.push_back({s.str(f.filename), s.str(f.name), e.time_us, i, 0});
  }
  return marks;
}

bool from_annotations(const DeviceTimeline& t, const TraceEvents& events, const std::vector<StepMark>& user_defined, Steps& out) {
  // group name -> (START marks, other marks)
  std::map<std::string, std::pair<std::vector<std::size_t>, std::vector<std::size_t>>> groups;
  auto add = [&](const StepMark& m) {
    if (annotation_priority(m.name) == 0 || before_window(m, events)) return;
    const std::string key = starts_with(m.name, "ProfilerStep#") ? std::string("ProfilerStep#N") : std::string(m.name);
    auto& g = groups[key];
    (m.stage == "START" ? g.first : g.second).push_back(m.event_index);
  };
  for (const StepMark& m : t.steps) add(m);
  for (const StepMark& m : user_defined) add(m);
  for (int p = 1; p <= 5; ++p) {
    std::string best_name;
    std::vector<std::size_t> best;
    for (auto& [name, g] : groups) {
      if (annotation_priority(name == "ProfilerStep#N" ? "ProfilerStep#" : name) != p) continue;
      auto marks = unique_sorted(g.first.empty() ? g.second : g.first);
      if (marks.size() > best.size()) {
        best = std::move(marks);
        best_name = name;
      }
    }
    if (best.size() >= kMinBoundaries) {
      out.source = source_of_priority(p);
      out.marker = best_name + " START" + (t.steps.empty() && !user_defined.empty() ? " (user_defined trace entries)" : "");
      out.boundaries = std::move(best);
      return true;
    }
    if (best.size() > out.too_few_marks) {
      out.too_few_source = source_of_priority(p);
      out.too_few_marks = best.size();
    }
  }
  return false;
}

// Steps from the runs of torch/optim allocations.
bool from_optimizer_allocations(const Snapshot& s, const DeviceTimeline& t, Steps& out) {
  OptimizerStacks is_optimizer(s);
  const std::vector<OptimizerRun> runs = optimizer_runs(t, is_optimizer);
  if (runs.size() < kMinBoundaries) {
    if (runs.size() > out.too_few_marks) {
      out.too_few_source = StepSource::OptimizerTrace;
      out.too_few_marks = runs.size();
    }
    return false;
  }
  out.source = StepSource::OptimizerTrace;
  out.marker = "torch/optim allocations";
  out.boundaries.clear();
  for (const OptimizerRun& r : runs) out.boundaries.push_back(r.first);
  return true;
}

// What a frame says about the pass it runs in: a module call (forward, nn.Module call plumbing) or
// the autograd engine (loss.backward() and the engine's own C++ frames).
enum class PassFrame : std::uint8_t { None, ModuleCall, Backward };

PassFrame pass_frame(std::string_view file, std::string_view name) {
  if (name == "forward" || name == "_call_impl" || name == "_wrapped_call_impl") return PassFrame::ModuleCall;
  if (starts_with(name, "torch::autograd::Engine::") || starts_with(name, "torch::autograd::python::PythonEngine::")) {
    return PassFrame::Backward;
  }
  if (path_has(file, "torch/autograd/") && (name == "backward" || name == "_engine_run_backward")) return PassFrame::Backward;
  if (path_has(file, "torch/_tensor.py") && name == "backward") return PassFrame::Backward;
  return PassFrame::None;
}

// A backward node's own frame (torch::autograd::generated::MmBackward0::apply, CppNode<...>::apply).
bool backward_node_frame(std::string_view name) {
  return name.find("Backward") != std::string_view::npos && name.find("::apply") != std::string_view::npos;
}

// Whether the allocations between two step boundaries all run inside one pass: a frame common to
// all their stacks opens a module call or the backward pass, or every one of them is a backward
// or an optimizer allocation. A training step holds forward, backward and optimizer work, so
// none of these is common to all of it; the layers of one pass share them. Memoized per frame
// and per stack, over flat arrays indexed by id.
class PassCheck {
 public:
  explicit PassCheck(const Snapshot& s)
      : s_(s), frame_kind_(s.frames.size(), kUnknown), stack_backward_(s.stack_count(), kUnknown), stack_seen_(s.stack_count(), 0),
        frame_mark_(s.frames.size(), 0), pass_lists_(s.stack_count()), optimizer_(s) {}

  bool inside_one_pass(const TraceEvents& events, std::size_t begin, std::size_t end) {
    ++interval_;
    common_.clear();
    bool first = true, all_backward = true, all_optimizer = true;
    for (std::size_t k = begin; k < end && k < events.size(); ++k) {
      const TraceEvent& e = events[k];
      if (e.action != Action::Alloc || e.stack >= stack_seen_.size() || stack_seen_[e.stack] == interval_) continue;
      stack_seen_[e.stack] = interval_;
      all_backward = all_backward && is_backward(e.stack);
      all_optimizer = all_optimizer && optimizer_(e.stack);
      keep_common(e.stack, first);
      first = false;
      if (common_.empty() && !all_backward && !all_optimizer) return false;
    }
    return !first;
  }

 private:
  static constexpr std::uint8_t kUnknown = 0xFF;

  PassFrame kind(FrameId f) {
    if (frame_kind_[f] == kUnknown) {
      frame_kind_[f] = static_cast<std::uint8_t>(pass_frame(s_.str(s_.frames[f].filename), s_.str(s_.frames[f].name)));
    }
    return static_cast<PassFrame>(frame_kind_[f]);
  }

  bool is_backward(StackId stack) {
    if (stack_backward_[stack] == kUnknown) {
      bool backward = false;
      const FrameId* frames = s_.stack_begin(stack);
      for (std::size_t i = 0; i < s_.stack_size(stack) && !backward; ++i) {
        backward = kind(frames[i]) == PassFrame::Backward || backward_node_frame(s_.str(s_.frames[frames[i]].name));
      }
      stack_backward_[stack] = backward ? 1 : 0;
    }
    return stack_backward_[stack] == 1;
  }

  // The pass frames common to every stack of the interval so far.
  void keep_common(StackId stack, bool first) {
    const std::span<const FrameId> frames = pass_frames(stack);
    if (first) {
      for (const FrameId f : frames) {
        if (std::find(common_.begin(), common_.end(), f) == common_.end()) common_.push_back(f);
      }
      return;
    }
    if (common_.empty()) return;
    ++mark_;
    for (const FrameId f : frames) frame_mark_[f] = mark_;
    common_.erase(std::remove_if(common_.begin(), common_.end(), [&](FrameId f) { return frame_mark_[f] != mark_; }), common_.end());
  }

  // A stack's frames that open a pass (a C++ stack of dozens of frames holds a few), listed the
  // first time the stack is met: only they can be common to an interval.
  std::span<const FrameId> pass_frames(StackId stack) {
    PassList& list = pass_lists_[stack];
    if (!list.listed) {
      list = {static_cast<std::uint32_t>(pass_frames_.size()), 0, true};
      const FrameId* frames = s_.stack_begin(stack);
      for (std::size_t i = 0; i < s_.stack_size(stack); ++i) {
        if (kind(frames[i]) != PassFrame::None) pass_frames_.push_back(frames[i]);
      }
      list.count = static_cast<std::uint32_t>(pass_frames_.size() - list.begin);
    }
    return {pass_frames_.data() + list.begin, list.count};
  }

  const Snapshot& s_;
  std::vector<std::uint8_t> frame_kind_;      // by frame id: PassFrame, or kUnknown
  std::vector<std::uint8_t> stack_backward_;  // by stack id: 0, 1 or kUnknown
  std::vector<std::uint32_t> stack_seen_;     // by stack id: the last interval that saw it
  std::vector<std::uint32_t> frame_mark_;     // by frame id: the last stack that holds it
  struct PassList {
    std::uint32_t begin = 0, count = 0;  // its pass frames: pass_frames_[begin, begin + count)
    bool listed = false;
  };
  std::vector<PassList> pass_lists_;          // by stack id
  std::vector<FrameId> pass_frames_;          // the listed stacks' pass frames, one stack after another
  std::uint32_t interval_ = 0, mark_ = 0;
  std::vector<FrameId> common_;
  OptimizerStacks optimizer_;
};

// A stack allocated at regular gaps in the window's allocation sequence: its median gap.
struct PeriodCandidate {
  std::size_t period;
  StackId stack;
  std::uint32_t first;  // position of its first allocation
};

// The allocation positions of every stack, grouped by stack id in one flat array (a counting sort):
// positions of stack s are at [offsets[s], offsets[s + 1]).
struct StackPositions {
  std::vector<std::uint32_t> alloc_events;  // event index of each allocation, in order
  std::vector<std::uint32_t> offsets;       // by stack id, stack_count + 1 entries
  std::vector<std::uint32_t> positions;     // indices into alloc_events
  std::size_t count(StackId s) const { return offsets[s + 1] - offsets[s]; }
  const std::uint32_t* begin(StackId s) const { return positions.data() + offsets[s]; }
};

// From the lifetimes: one for every alloc event, in event order (the others, allocated before the
// window, have no alloc index), so the events themselves are not read.
StackPositions stack_positions(const Snapshot& s, const Lifetimes& lifetimes) {
  StackPositions p;
  const std::size_t stacks = s.stack_count();
  p.offsets.assign(stacks + 1, 0);
  std::vector<StackId> stack_of;  // by position in alloc_events
  p.alloc_events.reserve(lifetimes.size());
  stack_of.reserve(lifetimes.size());
  for (const Lifetime& l : lifetimes) {
    if (l.alloc == kBeforeWindow) continue;
    if (l.stack < stacks) ++p.offsets[l.stack + 1];
    p.alloc_events.push_back(l.alloc);
    stack_of.push_back(l.stack);
  }
  for (std::size_t i = 0; i < stacks; ++i) p.offsets[i + 1] += p.offsets[i];
  p.positions.resize(p.offsets[stacks]);
  std::vector<std::uint32_t> fill(p.offsets.begin(), p.offsets.end() - 1);
  for (std::size_t i = 0; i < stack_of.size(); ++i) {
    if (stack_of[i] < stacks) p.positions[fill[stack_of[i]]++] = static_cast<std::uint32_t>(i);
  }
  return p;
}

// Stacks allocated at regular gaps (80% of their gaps within 10% of the median), each with its period.
std::vector<PeriodCandidate> period_candidates(const StackPositions& p) {
  std::vector<PeriodCandidate> candidates;
  const std::size_t n = p.alloc_events.size();
  std::vector<std::uint32_t> gaps, sorted;
  for (StackId stack = 0; stack + 1 < p.offsets.size(); ++stack) {
    const std::size_t count = p.count(stack);
    if (count < kMinBoundaries || count * 2 > n) continue;
    const std::uint32_t* pos = p.begin(stack);
    gaps.clear();
    for (std::size_t i = 1; i < count; ++i) gaps.push_back(pos[i] - pos[i - 1]);
    sorted = gaps;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
    const std::size_t median = sorted[sorted.size() / 2];
    if (median < 2) continue;
    const std::size_t tol = std::max<std::size_t>(1, median / 10);
    std::size_t regular = 0;
    for (auto g : gaps) regular += (g + tol >= median && g <= median + tol);
    if (regular * 5 < gaps.size() * 4) continue;
    candidates.push_back({median, stack, pos[0]});
  }
  return candidates;
}

// The stack that marks the winning period: periods within 2% of each other form a group, the
// largest group wins (ties: the longer period), and its stack allocated first marks the steps.
// Null when no period is shared by two stacks (one stack alone is not a step).
const PeriodCandidate* period_marker(std::vector<PeriodCandidate>& candidates) {
  std::sort(candidates.begin(), candidates.end(), [](const PeriodCandidate& a, const PeriodCandidate& b) { return a.period < b.period; });
  std::size_t best_begin = 0, best_end = 0;
  for (std::size_t i = 0; i < candidates.size();) {
    std::size_t j = i;
    while (j < candidates.size() && candidates[j].period * 50 <= candidates[i].period * 51) ++j;
    if (j - i >= best_end - best_begin) {
      best_begin = i;
      best_end = j;
    }
    i = j;
  }
  if (best_end - best_begin < 2) return nullptr;
  const PeriodCandidate* marker = &candidates[best_begin];
  for (std::size_t i = best_begin; i < best_end; ++i) {
    if (candidates[i].first < marker->first || (candidates[i].first == marker->first && candidates[i].stack < marker->stack)) {
      marker = &candidates[i];
    }
  }
  return marker;
}

// How many of the steps between `bounds` allocated a block that the window frees later: memory
// freed only in bursts every few steps (Python's garbage collector breaking reference cycles)
// frees nothing inside most steps, yet unlike a loading loop it does free what they allocated.
std::size_t steps_freed_later(const Lifetimes& lifetimes, const std::vector<std::size_t>& bounds) {
  std::vector<bool> freed(bounds.size(), false);
  for (const Lifetime& l : lifetimes) {
    if (l.alloc == kBeforeWindow || l.free == kStillLive || l.alloc < bounds.front()) continue;
    const std::size_t step = static_cast<std::size_t>(std::upper_bound(bounds.begin(), bounds.end(), l.alloc) - bounds.begin()) - 1;
    if (step + 1 < bounds.size()) freed[step] = true;
  }
  return static_cast<std::size_t>(std::count(freed.begin(), freed.end(), true));
}

// The period of the allocation-stack sequence: the steps it implies must cover most of the window,
// free memory inside them or later (loading loops never free) and not sit inside one pass (the layers of one forward,
// one backward or one optimizer.step()).
bool from_period(const Snapshot& s, const TraceEvents& events, const Lifetimes& lifetimes, Steps& out) {
  const StackPositions p = stack_positions(s, lifetimes);
  const std::size_t n = p.alloc_events.size();
  if (n < 9) return false;
  std::vector<PeriodCandidate> candidates = period_candidates(p);
  const PeriodCandidate* marker = period_marker(candidates);
  if (!marker) return false;
  const std::uint32_t* pos = p.begin(marker->stack);
  const std::size_t count = p.count(marker->stack);
  if (static_cast<std::size_t>(pos[count - 1] - pos[0]) * 10 < n * 6) return false;
  std::vector<std::size_t> bounds;
  for (std::size_t i = 0; i < count; ++i) bounds.push_back(p.alloc_events[pos[i]]);
  std::size_t with_frees = 0;
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    for (std::size_t k = bounds[i]; k < bounds[i + 1]; ++k) {
      if (events[k].action == Action::FreeCompleted) {
        ++with_frees;
        break;
      }
    }
  }
  if (with_frees * 2 < bounds.size() - 1 && steps_freed_later(lifetimes, bounds) * 2 < bounds.size() - 1) return false;
  PassCheck passes(s);
  std::size_t nested = 0;
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) nested += passes.inside_one_pass(events, bounds[i], bounds[i + 1]);
  if (nested * 2 >= bounds.size() - 1) return false;
  out.source = StepSource::Period;
  const SiteChoice c = choose_site(s, marker->stack);
  out.marker = c.found ? fmt::format("{}:{}", s.str(s.frames[c.frame].filename), s.frames[c.frame].line) : "";
  out.boundaries = std::move(bounds);
  return true;
}

void thin(std::vector<std::size_t>& b) {
  if (b.size() <= kMaxBoundaries) return;
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < kMaxBoundaries; ++i) out.push_back(b[i * (b.size() - 1) / (kMaxBoundaries - 1)]);
  b = unique_sorted(std::move(out));
}

}  // namespace

bool path_has(std::string_view file, std::string_view part) {
  if (file.find(part) != std::string_view::npos) return true;
  if (file.find('\\') == std::string_view::npos) return false;
  const auto same = [](char a, char b) { return a == b || (a == '\\' && b == '/'); };
  return std::search(file.begin(), file.end(), part.begin(), part.end(), same) != file.end();
}

bool is_optimizer_stack(const Snapshot& s, StackId stack) {
  const FrameId* frames = s.stack_begin(stack);
  bool module_call = false;
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    const Frame& f = s.frames[frames[i]];
    const std::string_view file = s.str(f.filename), name = s.str(f.name);
    if (path_has(file, "torch/optim/")) return name != "zero_grad" && !module_call;
    // A closure passed to optimizer.step() (Lightning) runs forward and backward inside it.
    if (name == "forward" || name == "_call_impl" || name == "_wrapped_call_impl" ||
        (path_has(file, "torch/autograd/") && (name == "backward" || name == "_engine_run_backward"))) {
      module_call = true;
    }
  }
  return false;
}

bool OptimizerStacks::operator()(StackId stack) {
  if (stack >= known_.size()) return is_optimizer_stack(snapshot_, stack);
  if (known_[stack] == kUnknown) known_[stack] = is_optimizer_stack(snapshot_, stack) ? 1 : 0;
  return known_[stack] == 1;
}

std::vector<OptimizerRun> optimizer_runs(const DeviceTimeline& t, OptimizerStacks& is_optimizer) {
  std::vector<OptimizerRun> runs;
  std::size_t others = 0;
  bool in_run = false;
  for (const Lifetime& l : t.lifetimes) {  // the window's allocations come in event order
    if (l.alloc == kBeforeWindow) continue;
    if (is_optimizer(l.stack)) {
      if (!in_run) runs.push_back({l.alloc, l.alloc});
      runs.back().last = l.alloc;
      in_run = true;
      others = 0;
    } else if (in_run && ++others >= 3) {
      in_run = false;
    }
  }
  return runs;
}

std::size_t SiteIndex::of(StackId stack) {
  if (stack >= by_stack_.size()) by_stack_.resize(std::max<std::size_t>(snapshot_.stack_count(), stack + 1), 0);
  if (by_stack_[stack]) return by_stack_[stack] - 1;
  auto [pos, inserted] = by_frame_.emplace(cache_.key(stack), sites_.size());
  if (inserted) sites_.push_back(cache_.describe(stack));
  by_stack_[stack] = static_cast<std::uint32_t>(pos->second + 1);
  return pos->second;
}

std::size_t Steps::step_of(std::size_t event_index) const {
  return static_cast<std::size_t>(std::upper_bound(boundaries.begin(), boundaries.end(), event_index) - boundaries.begin());
}

Steps find_steps(const Snapshot& s, const DeviceTimeline& t) {
  Steps out;
  out.device = t.device;
  if (t.device < 0 || static_cast<std::size_t>(t.device) >= s.device_traces.size()) return out;
  const auto& events = s.events_of(t.device);
  if (!from_annotations(t, events, user_defined_marks(s, t, events), out) && !from_optimizer_allocations(s, t, out) &&
      !from_period(s, events, t.lifetimes, out)) {
    out.source = StepSource::None;
    out.boundaries.clear();
  }
  thin(out.boundaries);
  return out;
}

namespace {

// The highest live bytes within each step (the boundaries ascend): the state at its first
// boundary and after each of its events, up to the next boundary.
std::vector<std::int64_t> step_peaks(const DeviceTimeline& t, const std::vector<std::size_t>& B) {
  std::vector<std::int64_t> peaks;
  if (B.size() < 2 || B.back() >= t.curve.size()) return peaks;
  for (std::size_t j = 0; j + 1 < B.size(); ++j) peaks.push_back(t.curve.max_between(B[j], B[j + 1]));
  return peaks;
}

}  // namespace

StepTable step_table(const Snapshot& s, const DeviceTimeline& t, const Lifetimes& lifetimes, Steps steps,
                     SiteIndex& sites) {
  StepTable table;
  table.steps = std::move(steps);
  const auto& B = table.steps.boundaries;
  const std::size_t nb = B.size();
  if (nb == 0) return table;
  const auto& events = s.events_of(t.device);
  for (std::size_t j = 0; j < nb; ++j) {
    table.live.push_back(B[j] < t.curve.size() ? t.curve[B[j]] : t.end_live);
    std::int64_t time = 0;
    if (B[j] < events.size() && events[B[j]].has_time) time = events[B[j]].time_us;
    else if (B[j] > 0 && B[j] - 1 < events.size() && events[B[j] - 1].has_time) time = events[B[j] - 1].time_us;
    table.time_us.push_back(time);
  }
  table.step_peak = step_peaks(t, B);
  constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> series_of;  // site -> index in table.series (kNone: none yet)
  std::vector<std::vector<std::int64_t>> dbytes, dblocks;
  auto series = [&](std::size_t site) -> std::size_t {
    if (site >= series_of.size()) series_of.resize(std::max(site + 1, series_of.size() * 2), kNone);
    if (series_of[site] == kNone) {
      series_of[site] = table.series.size();
      SiteSeries ss;
      ss.site = site;
      ss.allocs.assign(nb - 1, 0);
      table.series.push_back(std::move(ss));
      dbytes.emplace_back(nb + 1, 0);
      dblocks.emplace_back(nb + 1, 0);
    }
    return series_of[site];
  };
  // The window's allocations come in event order: the boundary after each alloc only moves
  // forwards; most blocks are freed before the next boundary.
  std::size_t next_boundary = 0;
  auto boundaries_up_to = [&](std::size_t from, std::size_t index) {  // boundaries <= index, knowing `from` are
    if (from >= nb || B[from] > index) return from;
    return static_cast<std::size_t>(std::upper_bound(B.begin() + static_cast<std::ptrdiff_t>(from), B.end(), index) - B.begin());
  };
  for (const Lifetime& l : lifetimes) {
    std::size_t first = 0;
    if (l.alloc != kBeforeWindow) {
      while (next_boundary < nb && B[next_boundary] <= l.alloc) ++next_boundary;
      first = next_boundary;
    }
    const std::size_t end = l.free == kStillLive ? nb : boundaries_up_to(first, l.free);
    const bool inside = l.alloc != kBeforeWindow && first > 0 && first < nb;
    if (first >= end && !inside) continue;
    const std::size_t k = series(sites.of(l.stack));
    if (first < nb && l.free == kStillLive) ++table.series[k].kept;
    if (first < end) {
      // Wrapping: the running sum below is exact whenever the true bytes fit (absurd sizes are
      // flagged by plausibility).
      dbytes[k][first] = wrapping_add(dbytes[k][first], static_cast<std::int64_t>(l.size));
      dbytes[k][end] = wrapping_sub(dbytes[k][end], static_cast<std::int64_t>(l.size));
      dblocks[k][first] += 1;
      dblocks[k][end] -= 1;
    }
    if (inside) {
      SiteSeries& ss = table.series[k];
      ++ss.allocs[first - 1];
      const auto size = static_cast<std::int64_t>(l.size);
      if (ss.min_block == 0 || size < ss.min_block) ss.min_block = size;
    }
  }
  for (std::size_t k = 0; k < table.series.size(); ++k) {
    SiteSeries& ss = table.series[k];
    ss.bytes.resize(nb);
    ss.blocks.resize(nb);
    std::int64_t b = 0, n = 0;
    for (std::size_t j = 0; j < nb; ++j) {
      b = wrapping_add(b, dbytes[k][j]);
      n += dblocks[k][j];
      ss.bytes[j] = b;
      ss.blocks[j] = n;
    }
  }
  return table;
}

}  // namespace memsnap
