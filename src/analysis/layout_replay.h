// The allocator layout of one device at earlier moments: the final segments with later segment
// events undone, and the blocks live then taken from the timeline's lifetimes; the state
// memory_viz's "Allocator State History" shows (spec §11.1). Shared by the OOM analysis and the
// HTML report's segment maps. Only the segment events are walked: the live blocks cost one pass
// over the lifetimes for any number of moments.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "analysis/timeline.h"
#include "model/snapshot.h"

namespace memsnap {

// a + b, saturating instead of wrapping (addresses in broken traces can be anything).
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b);

struct DeviceLayout {
  // One reserved address range [start, end).
  struct Range {
    std::uint64_t end = 0;
    std::int64_t stream = 0;
    bool is_large = true;
    PoolId pool;  // segment_pool_id (the default pool unless a CUDA graph / MemPool holds it)
  };
  // A live (allocated or pending-free) block: requested bytes and the bytes it occupies.
  struct Live {
    std::uint64_t requested = 0;
    std::uint64_t occupied = 0;
    StackId stack = kNoStack;
  };

  std::map<std::uint64_t, Range> segments;          // by start address
  std::vector<std::pair<std::uint64_t, Live>> live;  // by address

  std::uint64_t reserved() const;
  std::uint64_t allocated() const;  // requested bytes of the live blocks

  // Calls fn(segment_start, range, piece_begin, piece_end, live) for each piece of each segment
  // in address order; `live` is null for a free gap.
  template <typename Fn>
  void for_each_piece(Fn&& fn) const {
    for (const auto& [start, r] : segments) {
      std::uint64_t cursor = start;
      auto it = std::lower_bound(live.begin(), live.end(), start, [](const auto& b, std::uint64_t a) { return b.first < a; });
      if (it != live.begin()) {
        const auto prev = std::prev(it);
        cursor = std::max(cursor, std::min(r.end, saturating_add(prev->first, prev->second.occupied)));
      }
      for (; it != live.end() && it->first < r.end; ++it) {
        if (it->first > cursor) fn(start, r, cursor, it->first, static_cast<const Live*>(nullptr));
        const std::uint64_t from = std::max(cursor, it->first);
        const std::uint64_t to = std::min(r.end, saturating_add(it->first, it->second.occupied));
        if (to > from) fn(start, r, from, to, &it->second);
        cursor = std::max(cursor, to);
      }
      if (r.end > cursor) fn(start, r, cursor, r.end, static_cast<const Live*>(nullptr));
    }
  }
};

// A lifetime as a live block: blocks live at the end are the snapshot's own (their rounded size
// and stack); blocks freed later occupy their rounded request. False for an allocation the
// trace leaves open that the final state does not hold (a broken trace).
bool live_block(const Snapshot& snapshot, const DeviceTimeline& timeline, std::size_t lifetime,
                std::pair<std::uint64_t, DeviceLayout::Live>& out);

// The final layout of `device`: its segments and live blocks as the snapshot records them.
DeviceLayout final_device_layout(const Snapshot& snapshot, std::int64_t device);

// The layouts of the timeline's device just before each kept event index in `indices` (any
// order; result in the same order). Unknown addresses and overlaps in broken traces are
// tolerated: nothing here can loop or overflow.
std::vector<DeviceLayout> layouts_before(const Snapshot& snapshot, const DeviceTimeline& timeline,
                                         const std::vector<std::size_t>& indices);

// The layouts just before each of the timeline's studied oom events (timeline.studied_ooms), from
// the live sets build_timelines() keeps for them.
std::vector<DeviceLayout> layouts_before_ooms(const Snapshot& snapshot, const DeviceTimeline& timeline);

}  // namespace memsnap
