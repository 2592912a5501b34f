// LiveCurve: the live requested bytes of one device after each trace event. Only every
// kStride-th value is stored; the others are recomputed from the events in between, so the
// curve costs 1/kStride of a full array (it was 8 bytes an event, 100 MB on a 1 GB snapshot).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "model/event_pairing.h"
#include "model/snapshot.h"

namespace memsnap {

// Live bytes an event adds (alloc +size, free_completed -size, others 0) as a two's-complement
// delta: the curve's arithmetic wraps on hostile sizes instead of overflowing.
inline std::uint64_t live_delta(const TraceEvent& e) {
  if (e.action == Action::Alloc) return e.size;
  if (e.action == Action::FreeCompleted) return 0 - e.size;
  return 0;
}
inline std::int64_t add_live_delta(std::int64_t value, std::uint64_t delta) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(value) + delta);
}
inline std::int64_t subtract_live_delta(std::int64_t value, std::uint64_t delta) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(value) - delta);
}

class LiveCurve {
 public:
  static constexpr std::size_t kStride = kCurveStride;

  LiveCurve() = default;
  // Anchored at the end: the value after the last of `events` is `end_live`. Calls
  // visit(k, value) for every k from events.size() down to 0 while it fills the curve.
  template <typename Visit>
  LiveCurve(std::span<const TraceEvent> events, std::int64_t end_live, Visit&& visit) : events_(events) {
    checkpoints_.resize(events.size() / kStride + 1);
    block_max_.assign((events.size() + kStride - 1) / kStride, std::numeric_limits<std::int64_t>::min());
    block_min_.assign(block_max_.size(), std::numeric_limits<std::int64_t>::max());
    std::int64_t value = end_live;
    for (std::size_t k = events.size();; --k) {
      if (k % kStride == 0) checkpoints_[k / kStride] = value;
      visit(k, value);
      if (k == 0) break;
      std::int64_t& high = block_max_[(k - 1) / kStride];
      high = std::max(high, value);
      std::int64_t& low = block_min_[(k - 1) / kStride];
      low = std::min(low, value);
      value = subtract_live_delta(value, live_delta(events[k - 1]));
    }
  }

  // From its checkpoints and block extremes, already known (events.size() / kStride + 1 and
  // ceil(events.size() / kStride) of them).
  LiveCurve(std::span<const TraceEvent> events, std::vector<std::int64_t> checkpoints, std::vector<std::int64_t> block_max,
            std::vector<std::int64_t> block_min)
      : events_(events), checkpoints_(std::move(checkpoints)), block_max_(std::move(block_max)), block_min_(std::move(block_min)) {}

  // Points: the events + 1 (the value before the first event, then after each).
  std::size_t size() const { return checkpoints_.empty() ? 0 : events_.size() + 1; }
  bool empty() const { return checkpoints_.empty(); }
  // The value after the first k events (k < size()).
  std::int64_t operator[](std::size_t k) const;
  // The first point of the lowest and of the highest value among points [from, to)
  // (from < to <= size()), as a walk over them finds: the blocks' extremes, the points of at
  // most 2 kStride events at the ends, and the one block holding each.
  struct Extremes {
    std::size_t lo = 0, hi = 0;
    std::int64_t low = 0, high = 0;
  };
  Extremes extremes(std::size_t from, std::size_t to) const;
  // The highest of the points from..to, both included (from <= to < size()).
  std::int64_t max_between(std::size_t from, std::size_t to) const { return extremes(from, to + 1).high; }
  // Reads the points in ascending order in constant time each (a plot's walk over millions of
  // points, without an array of them); going back restarts from a checkpoint.
  class Reader {
   public:
    explicit Reader(const LiveCurve& curve) : curve_(curve) {}
    std::int64_t at(std::size_t k);

   private:
    const LiveCurve& curve_;
    std::size_t next_ = 0;  // value_ is the point at next_ (valid once started_)
    std::int64_t value_ = 0;
    bool started_ = false;
  };

 private:
  std::span<const TraceEvent> events_;  // the device's kept events (owned by the snapshot)
  std::vector<std::int64_t> checkpoints_;  // the value after k events, for k = 0, kStride, 2 kStride, ...
  std::vector<std::int64_t> block_max_;    // block b: the highest value after events b kStride .. (b + 1) kStride - 1
  std::vector<std::int64_t> block_min_;    // and the lowest
};

}  // namespace memsnap
