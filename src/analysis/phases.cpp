// Phases of a device's trace (phases.h): each event labelled from annotations or its stack, runs
// of labels turned into spans, backward passes without frames inferred from the order of frees,
// and the peak placed in its span.
#include "analysis/phases.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <fmt/format.h>
#include <map>
#include <string>

#include "model/frame_facts.h"
#include "base/units.h"

namespace memsnap {
namespace {

using phases_detail::kUnlabelled;
// A gap between forward events that frees this many forward allocations, last-in first-out, is a
// backward pass without frames.
constexpr std::size_t kMinBackwardFrees = 8;
constexpr std::size_t kMinBackwardAllocs = 2;  // and a quarter of the frees: a backward allocates gradients,
                                                // dropping a graph allocates nothing
constexpr double kLifoShare = 0.6;
constexpr std::size_t kFreedSharePercent = 50;
// A span with fewer labelled events than this between two spans of one phase is noise.
constexpr std::size_t kNoiseEvents = 3;

bool labelled_action(Action a) { return a == Action::Alloc || a == Action::FreeRequested || a == Action::FreeCompleted; }

// The phase an annotation's name names, Other when it names none.
Phase phase_of_annotation(std::string_view name) {
  if (name.rfind("Optimizer.step#", 0) == 0) return Phase::OptimizerStep;
  if (name.rfind("Optimizer.zero_grad#", 0) == 0) return Phase::ZeroGrad;
  if (name.find("dynamo_timed") != std::string_view::npos || name.rfind("ProfilerStep", 0) == 0) return Phase::Other;
  const std::string n = ascii_lower(name);
  if (n.find("zero_grad") != std::string::npos) return Phase::ZeroGrad;
  if (n.find("optimizer") != std::string::npos) return Phase::OptimizerStep;
  if (n.find("backward") != std::string::npos) return Phase::Backward;
  if (n.find("forward") != std::string::npos) return Phase::Forward;
  if (n.find("eval") != std::string::npos || n.find("inference") != std::string::npos || n.find("valid") != std::string::npos) {
    return Phase::Evaluation;
  }
  return Phase::Other;
}

struct Labels {
  std::vector<std::uint8_t> phase;      // per event: a Phase, or kUnlabelled
  std::vector<bool> from_annotation;    // per event
};

// Whether some frame is zero_grad's: only then does a stack name ZeroGrad (phase_of_stack).
bool has_zero_grad_frame(const Snapshot& s) {
  return std::any_of(s.frames.begin(), s.frames.end(), [&](const Frame& f) { return s.str(f.name) == "zero_grad"; });
}

Labels label_events(const Snapshot& s, const DeviceTimeline& t) {
  const TraceEvents& events = s.events_of(t.device);
  Labels l{std::vector<std::uint8_t>(events.size(), kUnlabelled), std::vector<bool>(events.size(), false)};
  std::vector<std::uint8_t> memo(s.stack_count(), kUnlabelled);
  auto phase_of = [&](StackId stack) {
    if (memo[stack] == kUnlabelled) memo[stack] = static_cast<std::uint8_t>(phase_of_stack(s, stack));
    return memo[stack];
  };
  if (!has_zero_grad_frame(s)) {
    // Only allocations are labelled then, and the lifetimes name each alloc event and its stack
    // (in a fraction of the events' bytes).
    for (const Lifetime& lt : t.lifetimes) {
      if (lt.alloc == kBeforeWindow || lt.alloc >= events.size() || lt.stack == kNoStack || lt.stack >= memo.size()) continue;
      if (phase_of(lt.stack) != static_cast<std::uint8_t>(Phase::Other)) l.phase[lt.alloc] = memo[lt.stack];
    }
  } else {
    for (std::size_t k = 0; k < events.size(); ++k) {
      const TraceEvent& e = events[k];
      if (!labelled_action(e.action) || e.stack == kNoStack || e.stack >= memo.size()) continue;
      // A free's frames may be its allocation's (PyTorch records those when it has no context of
      // the free), so a free names only zero_grad, which never allocates.
      const bool usable = e.action == Action::Alloc || phase_of(e.stack) == static_cast<std::uint8_t>(Phase::ZeroGrad);
      if (usable && phase_of(e.stack) != static_cast<std::uint8_t>(Phase::Other)) l.phase[k] = memo[e.stack];
    }
  }
  // Annotated regions override the stacks: START and END of one name, in order.
  std::map<std::string_view, std::size_t> open;
  for (const StepMark& m : t.steps) {
    const Phase p = phase_of_annotation(m.name);
    if (p == Phase::Other) continue;
    if (m.stage == "START") {
      open[m.name] = m.event_index;
    } else if (auto it = open.find(m.name); it != open.end() && m.stage == "END") {
      for (std::size_t k = it->second; k < std::min(m.event_index, events.size()); ++k) {
        l.phase[k] = static_cast<std::uint8_t>(p);
        l.from_annotation[k] = true;
      }
      open.erase(it);
    }
  }
  return l;
}

// A set of events as one bit an event: tested, counted over a range, and walked in order.
class EventBits {
 public:
  explicit EventBits(std::size_t events) : words_((events + 63) / 64, 0) {}
  void set(std::size_t k) { words_[k / 64] |= std::uint64_t{1} << (k % 64); }
  bool test(std::size_t k) const { return (words_[k / 64] >> (k % 64)) & 1; }
  // Events of the set among [from, to).
  std::size_t count(std::size_t from, std::size_t to) const {
    std::size_t n = 0;
    while (from < to && from % 64 != 0) n += test(from++);
    for (; from + 64 <= to; from += 64) n += static_cast<std::size_t>(std::popcount(words_[from / 64]));
    while (from < to) n += test(from++);
    return n;
  }
  std::uint64_t word(std::size_t w) const { return words_[w]; }
  std::size_t words() const { return words_.size(); }

 private:
  std::vector<std::uint64_t> words_;
};

// Which events are allocations, from the lifetimes (one for every alloc event), so that a
// stretch's allocations are counted without reading its events.
EventBits alloc_bits(const Lifetimes& lifetimes, std::size_t events) {
  EventBits bits(events);
  for (const Lifetime& lt : lifetimes) {
    if (lt.alloc != kBeforeWindow && lt.alloc < events) bits.set(lt.alloc);
  }
  return bits;
}

// The labelled events, eight labels at a time (most events are unlabelled frees).
EventBits labelled_bits(const std::vector<std::uint8_t>& phase) {
  const std::size_t n = phase.size();
  EventBits bits(n);
  std::size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    std::uint64_t w;
    std::memcpy(&w, phase.data() + k, 8);
    if (w == ~std::uint64_t{0}) continue;  // eight kUnlabelled
    for (std::size_t j = 0; j < 8; ++j) {
      if (phase[k + j] != kUnlabelled) bits.set(k + j);
    }
  }
  for (; k < n; ++k) {
    if (phase[k] != kUnlabelled) bits.set(k);
  }
  return bits;
}

// Each free_completed of a forward allocation, with that allocation's event: a set of events, and
// the allocations in the order of their frees (a free's rank is its position there). A lifetime
// ends at a free_completed, or at an alloc that reused its address (skipped). Marking a gap
// Backward relabels only unlabelled events, so a forward allocation stays one throughout.
class ForwardFrees {
 public:
  ForwardFrees(const Lifetimes& lifetimes, const std::vector<std::uint8_t>& phase, const EventBits& allocs, std::size_t events)
      : bits_(events) {
    const auto fwd = static_cast<std::uint8_t>(Phase::Forward);
    std::vector<std::pair<EventIndex, EventIndex>> frees;  // (free, alloc), in the lifetimes' order
    for (const Lifetime& lt : lifetimes) {
      if (lt.alloc != kBeforeWindow && lt.free != kStillLive && lt.free < events && lt.alloc < events &&
          phase[lt.alloc] == fwd && !allocs.test(lt.free)) {
        frees.emplace_back(lt.free, lt.alloc);
        bits_.set(lt.free);
      }
    }
    before_word_.resize(bits_.words());
    std::uint32_t n = 0;
    for (std::size_t w = 0; w < bits_.words(); ++w) {
      before_word_[w] = n;
      n += static_cast<std::uint32_t>(std::popcount(bits_.word(w)));
    }
    alloc_.resize(n);
    for (const auto& [free, alloc] : frees) alloc_[rank(free)] = alloc;  // a later lifetime's wins, as in order
  }
  const EventBits& bits() const { return bits_; }
  // The forward frees before event k: the position among them (in event order) of the one at k,
  // or of the first one after k. k < 64 x the bits' words.
  std::size_t rank(std::size_t k) const {
    return before_word_[k / 64] + static_cast<std::size_t>(std::popcount(bits_.word(k / 64) & ((std::uint64_t{1} << (k % 64)) - 1)));
  }
  EventIndex alloc(std::size_t rank) const { return alloc_[rank]; }

 private:
  EventBits bits_;
  std::vector<std::uint32_t> before_word_;  // per word of bits_: the forward frees in the words before it
  std::vector<EventIndex> alloc_;
};

// Calls fn(k) for each event of a, or of b when there is one, in [from, to), in order.
template <typename Fn>
void for_each_event(const EventBits& a, const EventBits* b, std::size_t from, std::size_t to, Fn&& fn) {
  for (std::size_t w = from / 64; w < a.words() && w * 64 < to; ++w) {
    std::uint64_t bits = b ? a.word(w) | b->word(w) : a.word(w);
    if (w == from / 64) bits &= ~std::uint64_t{0} << (from % 64);
    while (bits != 0) {
      const std::size_t k = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
      if (k >= to) return;
      fn(k);
      bits &= bits - 1;
    }
  }
}

// Backward passes without frames: inside runs of forward labels, a gap of unlabelled events that
// allocates (gradients) and frees at least half of the forward memory since the pass began, last
// in first out, is labelled Backward (FreeOrder). Only the labelled events and the frees of
// forward allocations change what the walk decides, so it visits only those.
}  // namespace

namespace phases_detail {

void infer_backward_from_frees(std::vector<std::uint8_t>& phases, const Lifetimes& lifetimes, const TraceEvents& events,
                               std::vector<bool>& inferred) {
  const auto fwd = static_cast<std::uint8_t>(Phase::Forward);
  if (std::find(phases.begin(), phases.end(), fwd) == phases.end()) return;  // no forward run, no gap in one
  const EventBits allocs = alloc_bits(lifetimes, events.size());
  const ForwardFrees forward_frees(lifetimes, phases, allocs, events.size());
  const EventBits labelled = labelled_bits(phases);
  std::size_t pass_start = 0;
  std::int64_t fwd_live = 0;       // forward allocations of this pass still live
  std::int64_t live_at_mark = 0;   // fwd_live at the last forward event
  std::size_t prev_mark = SIZE_MAX;  // the last forward event of the current run of forward labels
  // A gap holds only unlabelled events: of them, the walk needs the frees of forward allocations.
  auto gap_is_backward = [&](std::size_t from, std::size_t to) {
    std::size_t frees = 0, lifo = 0;
    const std::size_t allocated = allocs.count(from, to);
    std::uint64_t freed = 0;
    EventIndex last_alloc = kBeforeWindow;
    std::size_t rank = from < events.size() ? forward_frees.rank(from) : 0;
    for_each_event(forward_frees.bits(), nullptr, from, to, [&](std::size_t k) {
      const EventIndex a = forward_frees.alloc(rank++);
      if (a < pass_start) return;
      if (frees > 0 && a < last_alloc) ++lifo;
      last_alloc = a;
      ++frees;
      freed += events[k].size;
    });
    return frees >= kMinBackwardFrees && allocated >= kMinBackwardAllocs && allocated * 4 >= frees &&
           double(lifo) >= kLifoShare * double(frees - 1) && live_at_mark > 0 &&
           freed * 100 >= static_cast<std::uint64_t>(live_at_mark) * kFreedSharePercent;
  };
  auto mark_backward = [&](std::size_t from, std::size_t to) {
    for (std::size_t j = from; j < to; ++j) {
      phases[j] = static_cast<std::uint8_t>(Phase::Backward);
      inferred[j] = true;
    }
  };
  std::size_t freed_seen = 0;  // forward frees visited so far: the rank of the next one
  for_each_event(labelled, &forward_frees.bits(), 0, events.size(), [&](std::size_t k) {
    const std::uint8_t phase = phases[k];
    const bool forward_free = forward_frees.bits().test(k);
    const EventIndex freed_alloc = forward_free ? forward_frees.alloc(freed_seen++) : kBeforeWindow;
    if (phase != kUnlabelled && phase != fwd) {
      if (prev_mark != SIZE_MAX && k - prev_mark > kMinBackwardFrees && gap_is_backward(prev_mark + 1, k)) mark_backward(prev_mark + 1, k);
      prev_mark = SIZE_MAX;
      return;
    }
    if (phase == fwd) {
      if (prev_mark == SIZE_MAX) {  // a forward run after another phase (or the start) begins a pass
        pass_start = k;
        fwd_live = 0;
      } else if (k - prev_mark > kMinBackwardFrees && gap_is_backward(prev_mark + 1, k)) {
        mark_backward(prev_mark + 1, k);
        pass_start = k;
        fwd_live = 0;
      }
      prev_mark = k;
      if (allocs.test(k)) fwd_live += static_cast<std::int64_t>(events[k].size);
    }
    if (freed_alloc != kBeforeWindow && freed_alloc >= pass_start) fwd_live -= static_cast<std::int64_t>(events[k].size);
    if (phase == fwd) live_at_mark = fwd_live;
  });
  // The last gap of a run: from its last forward event to the next other label or the end.
  if (prev_mark != SIZE_MAX) {
    std::size_t to = prev_mark + 1;
    while (to < events.size() && phases[to] == kUnlabelled) ++to;
    if (to - prev_mark > kMinBackwardFrees && gap_is_backward(prev_mark + 1, to)) mark_backward(prev_mark + 1, to);
  }
}

}  // namespace phases_detail

namespace {

std::vector<PhaseSpan> spans_of(const Labels& l, const std::vector<bool>& inferred) {
  std::vector<PhaseSpan> spans;
  std::vector<std::size_t> counts;  // labelled events per span
  for (std::size_t k = 0; k < l.phase.size(); ++k) {
    if (l.phase[k] == kUnlabelled) continue;
    const auto p = static_cast<Phase>(l.phase[k]);
    const PhaseSource src = l.from_annotation[k] ? PhaseSource::Annotations : inferred[k] ? PhaseSource::FreeOrder : PhaseSource::Stacks;
    if (spans.empty() || spans.back().phase != p) {
      if (spans.empty() && k > 0) {
        spans.push_back({Phase::Other, PhaseSource::Stacks, 0, k});
        counts.push_back(0);
      }
      if (!spans.empty()) spans.back().end = k;
      spans.push_back({p, src, k, k + 1});
      counts.push_back(0);
    }
    ++counts.back();
  }
  if (!spans.empty()) spans.back().end = l.phase.size();
  // Merge A, B, A when B is only a few events.
  std::vector<PhaseSpan> merged;
  std::vector<std::size_t> merged_counts;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    if (merged.size() >= 2 && merged_counts.back() < kNoiseEvents && merged[merged.size() - 2].phase == spans[i].phase &&
        merged.back().phase != Phase::Other) {
      merged.pop_back();
      merged_counts.pop_back();
      merged.back().end = spans[i].end;
      merged_counts.back() += counts[i];
      continue;
    }
    if (!merged.empty() && merged.back().phase == spans[i].phase) {
      merged.back().end = spans[i].end;
      merged_counts.back() += counts[i];
      continue;
    }
    merged.push_back(spans[i]);
    merged_counts.push_back(counts[i]);
  }
  return merged;
}

// The spans cover the events from the first, one after another (spans_of): each starts where
// the live bytes stood after the one before.
void measure_spans(const Snapshot& s, const DeviceTimeline& t, DevicePhases& d) {
  const TraceEvents& events = s.events_of(t.device);
  if (t.curve.size() == 0) return;
  // A pass begins at the first forward, and at a forward after a backward or an optimizer step (a
  // loss computed after zero_grad is still the same pass).
  std::size_t iteration = 0;
  bool pass_done = true;
  for (PhaseSpan& sp : d.spans) {
    const bool pass = sp.phase == Phase::Forward || sp.phase == Phase::Evaluation;
    if (pass && pass_done) {
      ++iteration;
      pass_done = false;
    }
    if (sp.phase == Phase::Backward || sp.phase == Phase::OptimizerStep) pass_done = true;
    sp.iteration = iteration;
    const std::size_t first = std::min(sp.first, events.size()), end = std::min(sp.end, events.size());
    sp.live_start = t.curve[first];
    sp.live_max = t.curve.max_between(first, std::max(first, end));
    if (sp.first < events.size() && events[sp.first].has_time) sp.start_us = events[sp.first].time_us;
    if (sp.end > 0 && sp.end - 1 < events.size() && events[sp.end - 1].has_time) sp.end_us = events[sp.end - 1].time_us;
  }
  d.iterations = iteration;
}

}  // namespace

bool DevicePhases::has(Phase p) const {
  return std::any_of(spans.begin(), spans.end(), [p](const PhaseSpan& s) { return s.phase == p; });
}

const PhaseSpan* DevicePhases::span_at(std::size_t index) const {
  if (index == 0) return nullptr;
  for (const PhaseSpan& s : spans) {
    if (s.first <= index - 1 && index - 1 < s.end) return &s;
  }
  return nullptr;
}

Phase phase_of_stack(const Snapshot& s, StackId stack) {
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    const Frame& f = s.frames[frames[i]];
    if (s.str(f.name) == "zero_grad") return Phase::ZeroGrad;
    if (f.facts & kOptimizerCode) return Phase::OptimizerStep;
    if (f.facts & (kBackwardCall | kAutogradEngine | kBackwardNode)) return Phase::Backward;
    if (f.facts & kForwardCall) return Phase::Forward;
  }
  return Phase::Other;
}

namespace {

// A forward that an OOM ended before its backward could run: the OOM is in it or right after it,
// and it kept what it allocated (at most a quarter of its allocations freed in it), as a training
// forward keeps the activations saved for backward. An inference forward frees its
// intermediates as the next layer consumes them: with no backward it stays evaluation.
bool forward_cut_by_oom(const DeviceTimeline& t, const TraceEvents& events, const PhaseSpan& sp) {
  const bool oom_ends_it =
      std::any_of(t.oom_events.begin(), t.oom_events.end(), [&](std::size_t e) { return e >= sp.first && e <= sp.end; });
  if (!oom_ends_it) return false;
  std::size_t allocs = 0, frees = 0;
  for (std::size_t k = sp.first; k < sp.end && k < events.size(); ++k) {
    allocs += events[k].action == Action::Alloc;
    frees += events[k].action == Action::FreeCompleted;
  }
  return allocs > 0 && frees * 4 <= allocs;
}

}  // namespace

DevicePhases find_phases(const Snapshot& s, const DeviceTimeline& t) {
  DevicePhases d;
  d.device = t.device;
  const TraceEvents& events = s.events_of(t.device);
  if (events.size() == 0) return d;
  Labels labels = label_events(s, t);
  std::vector<bool> inferred(events.size(), false);
  d.backward_from_frames = std::any_of(labels.phase.begin(), labels.phase.end(),
                                       [](std::uint8_t p) { return p == static_cast<std::uint8_t>(Phase::Backward); });
  if (!d.backward_from_frames) phases_detail::infer_backward_from_frees(labels.phase, t.lifetimes, events, inferred);
  d.backward_from_free_order = std::find(inferred.begin(), inferred.end(), true) != inferred.end();
  d.spans = spans_of(labels, inferred);
  if (!d.has(Phase::Backward)) {
    for (PhaseSpan& sp : d.spans) {
      if (sp.phase == Phase::Forward && !forward_cut_by_oom(t, events, sp)) sp.phase = Phase::Evaluation;
    }
  }
  d.annotated = std::any_of(d.spans.begin(), d.spans.end(), [](const PhaseSpan& sp) { return sp.source == PhaseSource::Annotations; });
  measure_spans(s, t, d);
  if (t.peak_allocated && peak_certainty(t) == PeakCertainty::InWindow) {
    for (std::size_t i = 0; i < d.spans.size(); ++i) {
      const PhaseSpan& sp = d.spans[i];
      if (t.peak_index == 0 || sp.first > t.peak_index - 1 || t.peak_index - 1 >= sp.end) continue;
      d.peak = PeakPhase{sp.phase, i, sp.iteration};
    }
  }
  return d;
}

std::vector<DevicePhases> find_all_phases(const Snapshot& s, const std::vector<DeviceTimeline>& timelines) {
  std::vector<DevicePhases> out;
  for (const DeviceTimeline& t : timelines) out.push_back(find_phases(s, t));
  return out;
}

std::string phase_label(const PhaseSpan& span) {
  static constexpr std::array<std::string_view, 6> words = {"forward pass", "backward pass", "optimizer step", "zero_grad",
                                                            "evaluation (a forward with no backward)", "untagged stretch"};
  std::string out(words[static_cast<std::size_t>(span.phase)]);
  if (span.source == PhaseSource::FreeOrder) out += " (inferred from the order of frees)";
  if (span.source == PhaseSource::Annotations) out += " (annotated)";
  return out;
}

std::string peak_place_text(const DevicePhases& d) {
  if (!d.peak) return "";
  const PhaseSpan& sp = d.spans[d.peak->span];
  std::string out = "the " + phase_label(sp);
  if (d.iterations > 1 && sp.iteration > 0) out += fmt::format(" of iteration {} of {}", sp.iteration, d.iterations);
  return out;
}

std::vector<std::pair<Category, std::uint64_t>> live_by_kind(const std::vector<Site>& sites) {
  std::map<Category, std::uint64_t> by;
  for (const Site& site : sites) by[site.no_stack ? Category::Unknown : site.category] += site.bytes;
  std::vector<std::pair<Category, std::uint64_t>> out(by.begin(), by.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace memsnap
