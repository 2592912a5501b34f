// EventPairing: one forward pass over a device's trace events that pairs every free_completed
// with the open alloc of its address and builds the allocations' lifetimes, and sums the live
// bytes for the curve (LiveSums). It runs on each
// batch of events as the reader stores it (EventStore, beside the pickle decoding), so the
// analysis finds the lifetimes ready; a device whose oldest events were dropped, or whose
// events were changed after they were stored, is paired again by the analysis.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/address_map.h"
#include "base/big_vector.h"
#include "model/snapshot.h"

namespace memsnap {

// Lifetimes pair each allocation with its free_completed inside the window:
//
//     event index   0 .. a ........ f .. n
//     lifetime            [alloc a, free f]   live in the states a+1 .. f
//
// Allocations older than the window (alloc = kBeforeWindow) and still live at the end
// (free = kStillLive) are open-ended.
//
// Event indices are 32-bit (the event store keeps at most limits::kMaxKeptEventsPerDevice events
// a device), so a lifetime takes 24 bytes.
using EventIndex = std::uint32_t;
inline constexpr EventIndex kBeforeWindow = std::numeric_limits<EventIndex>::max();
inline constexpr EventIndex kStillLive = std::numeric_limits<EventIndex>::max();

struct Lifetime {
  EventIndex alloc = kBeforeWindow;  // index of the alloc event
  EventIndex free = kStillLive;      // index of the free_completed event
  std::uint64_t size = 0;             // trace size (requested bytes)
  StackId stack = kNoStack;           // allocation stack; empty when allocated before the window and freed in it
  StackId free_stack = kNoStack;
  // Live in the state after the first `index` events.
  bool live_at(std::size_t index) const {
    return (alloc == kBeforeWindow || alloc < index) && (free == kStillLive || free >= index);
  }
};

static_assert(sizeof(Lifetime) == 24);
using Lifetimes = BigVector<Lifetime>;

// Frees that come in a burst: at least kMinBurstFrees matched free_completed with no alloc
// between them (the reference_cycles pattern looks at where their blocks came from).
inline constexpr std::size_t kMinBurstFrees = 6;
struct FreeBursts {
  std::vector<std::size_t> lifetimes;  // lifetime indices, burst after burst, in free order
  std::vector<std::size_t> ends;       // end of each burst in `lifetimes`
};

bool is_segment_action(Action a);

// The live-bytes curve keeps one value in kCurveStride (analysis/live_curve.h).
inline constexpr std::size_t kCurveStride = 64;

// The live requested bytes measured forward, as sums of the events' deltas (alloc +size,
// free_completed -size) from the first event: exact while every size and sum fits in 64 bits.
// The curve is anchored at the end (the final blocks' bytes), so the analysis adds that offset
// once it knows the final state.
struct LiveSums {
  bool exact = true;           // no size above INT64_MAX and no sum overflowed
  std::int64_t total = 0;      // after every event
  std::int64_t max = 0;        // the highest sum (0 before the first event counts)
  std::size_t max_index = 0;   // the latest number of events after which the sum is max
  std::int64_t min = 0;        // the lowest sum
  std::vector<std::int64_t> checkpoints;  // the sum before event k, for k = 0, kCurveStride, ...
  // The highest sum after each event of block b (events b * kCurveStride up to the next
  // block's first): a range's maximum without a walk over its events.
  std::vector<std::int64_t> block_max;
  std::vector<std::int64_t> block_min;  // and the lowest
};

// What the pass finds over the events it was given (indices count from the first of them).
struct EventPairs {
  struct Open {
    std::size_t lifetime;
    std::size_t requested;  // event index of a free_requested + 1, or 0
  };
  std::size_t events = 0;  // events paired
  std::array<std::uint64_t, kActionCount> actions{};  // events per action
  bool times_ascending = true;                         // every event has a time and times never go backwards
  std::uint64_t matched_frees = 0;                     // alloc ... free_completed pairs
  std::uint64_t frees_before_window = 0;               // free_completed with no alloc before them
  std::uint64_t bytes_freed_before_window = 0;
  // Every allocation, in event order, and a lifetime (alloc kBeforeWindow) for every
  // free_completed with no open alloc of its address.
  Lifetimes lifetimes;
  FreeBursts free_bursts;
  std::vector<std::size_t> segment_events;  // indices of segment_alloc/free/map/unmap events
  std::vector<std::size_t> oom_events;      // indices of the oom events
  AddressMap<Open> open;                    // allocations not freed by the last event
  AddressMap<std::size_t> orphan_requests;  // free_requested of blocks allocated before the window
  LiveSums live;
  std::uint64_t first_huge_size = TraceScan::kNone;  // TraceScan's, over these events
  std::uint64_t first_bad_time = TraceScan::kNone;
};

class EventPairer {
 public:
  // The next `count` events of the device, in order.
  void add(const TraceEvent* events, std::size_t count);
  // What every event added so far pairs to (the pairer is empty afterwards).
  EventPairs finish();

 private:
  void close_run();
  void add_live(const TraceEvent& e, std::size_t k);
  EventPairs p_;
  std::int64_t block_high_ = 0, block_low_ = 0;  // the block of live sums being summed: its extremes so far
  std::vector<std::size_t> run_;  // matched frees since the last alloc
  std::int64_t last_time_ = std::numeric_limits<std::int64_t>::min();
};

// The pairs of all `events` in one call.
EventPairs pair_all(const TraceEvents& events);

}  // namespace memsnap
