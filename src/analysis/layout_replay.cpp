// Backwards replay of one device's layout: segment_alloc / segment_free / segment_map /
// segment_unmap undone on the reserved ranges, live blocks from the lifetimes. Broken traces
// (unknown addresses, overlaps) are tolerated: nothing here can loop or overflow.
#include "analysis/layout_replay.h"

#include <algorithm>
#include <iterator>
#include <limits>

#include "analysis/fragmentation.h"
#include "base/parallel.h"

namespace memsnap {
namespace {

constexpr std::uint64_t kSmallBuffer = 2097152;  // small-pool segment size

using Range = DeviceLayout::Range;
using Ranges = std::map<std::uint64_t, Range>;

// The reserved ranges of one device, walked backwards through its segment events.
class SegmentReplay {
 public:
  SegmentReplay(const Snapshot& s, const DeviceTimeline& t, Ranges final_ranges)
      : s_(s), t_(t), final_(final_ranges), segs_(std::move(final_ranges)), next_(t.segment_events.size()) {}

  // Undoes the segment events with index >= `index` (only moves backwards).
  const Ranges& before(std::size_t index) {
    const TraceEvents& events = s_.events_of(t_.device);
    while (next_ > 0 && t_.segment_events[next_ - 1] >= index) {
      const std::size_t at = t_.segment_events[--next_];
      undo(events[at], at);
    }
    return segs_;
  }

 private:
  void undo(const TraceEvent& e, std::size_t at) {
    switch (e.action) {
      case Action::SegmentAlloc:
        if (segs_.erase(e.addr) == 0) carve(e.addr, saturating_add(e.addr, e.size));
        break;
      case Action::SegmentMap:
        carve(e.addr, saturating_add(e.addr, e.size));
        break;
      case Action::SegmentFree:
        restore(e, at, false);
        break;
      case Action::SegmentUnmap:
        restore(e, at, true);
        break;
      default:
        break;
    }
  }

  // Inserts a non-empty range; on a duplicate base address the longer range wins.
  void insert(std::uint64_t addr, const Range& r) {
    if (r.end <= addr) return;
    auto [it, inserted] = segs_.emplace(addr, r);
    if (!inserted && r.end > it->second.end) it->second = r;
  }

  // Removes [begin, end) from every range overlapping it, keeping the pieces outside it.
  void carve(std::uint64_t begin, std::uint64_t end) {
    if (begin >= end) return;
    auto it = segs_.upper_bound(begin);
    if (it != segs_.begin() && std::prev(it)->second.end > begin) --it;
    while (it != segs_.end() && it->first < end) {
      const std::uint64_t start = it->first;
      const Range r = it->second;
      it = segs_.erase(it);
      if (start < begin) insert(start, {begin, r.stream, r.is_large, r.pool});
      if (r.end > end) insert(end, {r.end, r.stream, r.is_large, r.pool});
    }
  }

  // Segment type of a restored range: the final segment containing it, else by size (small = 2 MiB).
  bool guess_large(std::uint64_t addr, std::uint64_t size) const {
    auto it = final_.upper_bound(addr);
    if (it != final_.begin() && addr < std::prev(it)->second.end) return std::prev(it)->second.is_large;
    return size > kSmallBuffer;
  }

  // Memory pool of a restored range: the event's pool_id, else the final segment containing it,
  // else the default pool (snapshots before 2026 name no pool on trace entries).
  PoolId guess_pool(std::uint64_t addr, std::size_t at) const {
    if (const PoolId p = s_.pool_of_event(t_.device, at); !p.is_default()) return p;
    auto it = final_.upper_bound(addr);
    if (it != final_.begin() && addr < std::prev(it)->second.end) return std::prev(it)->second.pool;
    return {};
  }

  // Adds a freed/unmapped range back; for unmaps merges it with same-stream neighbours.
  void restore(const TraceEvent& e, std::size_t at, bool merge) {
    const std::uint64_t end = saturating_add(e.addr, e.size);
    if (end <= e.addr) return;
    carve(e.addr, end);
    const std::int64_t stream = s_.stream(e);
    Range r{end, stream, guess_large(e.addr, e.size), guess_pool(e.addr, at)};
    if (merge) {
      if (auto right = segs_.find(end); right != segs_.end() && right->second.stream == stream && right->second.pool == r.pool) {
        r.end = right->second.end;
        r.is_large = right->second.is_large;
        segs_.erase(right);
      }
      auto left = segs_.lower_bound(e.addr);
      if (left != segs_.begin() && std::prev(left)->second.end == e.addr && std::prev(left)->second.stream == stream &&
          std::prev(left)->second.pool == r.pool) {
        std::prev(left)->second.end = r.end;
        return;
      }
    }
    insert(e.addr, r);
  }

  const Snapshot& s_;
  const DeviceTimeline& t_;
  const Ranges final_;  // the final segments, for the pool of restored ranges
  Ranges segs_;
  std::size_t next_;  // segment_events[next_ ..] are undone
};

Ranges final_ranges(const Snapshot& s, std::int64_t device) {
  Ranges out;
  for (const Segment& seg : s.segments) {
    if (seg.device != device) continue;
    const Range r{saturating_add(seg.address, seg.total_size), seg.stream, seg.is_large, seg.pool()};
    if (r.end <= seg.address) continue;
    auto [it, inserted] = out.emplace(seg.address, r);
    if (!inserted && r.end > it->second.end) it->second = r;
  }
  return out;
}

void sort_by_address(std::vector<std::pair<std::uint64_t, DeviceLayout::Live>>& live) {
  std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
}

}  // namespace

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  return a > kMax - b ? kMax : a + b;
}

bool live_block(const Snapshot& s, const DeviceTimeline& t, std::size_t lifetime,
                std::pair<std::uint64_t, DeviceLayout::Live>& out) {
  const Lifetime& l = t.lifetimes[lifetime];
  if (l.free == kStillLive) {
    const Block* b = final_block_of(s, t, lifetime);
    if (!b) return false;
    out = {b->address, {b->requested_size, b->size, b->stack}};
    return true;
  }
  const TraceEvents& events = s.events_of(t.device);
  const std::uint64_t addr = l.alloc != kBeforeWindow ? events[l.alloc].addr : events[l.free].addr;
  out = {addr, {l.size, round_request(l.size, s.settings.roundup_power2_divisions), allocating_stack(l)}};
  return true;
}

std::uint64_t DeviceLayout::reserved() const {
  std::uint64_t total = 0;
  for (const auto& [start, r] : segments) total = saturating_add(total, r.end - start);
  return total;
}

std::uint64_t DeviceLayout::allocated() const {
  std::uint64_t total = 0;
  for (const auto& [addr, b] : live) total = saturating_add(total, b.requested);
  return total;
}

DeviceLayout final_device_layout(const Snapshot& s, std::int64_t device) {
  DeviceLayout out;
  out.segments = final_ranges(s, device);
  s.for_each_live_block(device, [&](const Block& b) { out.live.push_back({b.address, {b.requested_size, b.size, b.stack}}); });
  sort_by_address(out.live);
  return out;
}

namespace {

// The layouts before `ascending` (clamped to the events), given the lifetimes live at each.
std::vector<DeviceLayout> layouts_from(const Snapshot& s, const DeviceTimeline& t, const std::vector<std::size_t>& ascending,
                                       const std::vector<std::vector<std::size_t>>& live) {
  std::vector<DeviceLayout> out(ascending.size());
  SegmentReplay segments(s, t, final_ranges(s, t.device));
  for (std::size_t k = ascending.size(); k-- > 0;) out[k].segments = segments.before(ascending[k]);  // only backwards
  // Each moment's live blocks are independent of the others' (and the larger part of the work
  // when the live set grows from one OOM to the next): on every core.
  parallel_for(ascending.size(), [&](std::size_t k) {
    DeviceLayout& layout = out[k];
    for (std::size_t lifetime : live[k]) {
      std::pair<std::uint64_t, DeviceLayout::Live> block;
      if (live_block(s, t, lifetime, block)) layout.live.push_back(block);
    }
    sort_by_address(layout.live);
  });
  return out;
}

}  // namespace

std::vector<DeviceLayout> layouts_before(const Snapshot& s, const DeviceTimeline& t, const std::vector<std::size_t>& indices) {
  const std::size_t events = s.events_of(t.device).size();
  std::vector<std::size_t> order(indices.size());  // positions in `indices`, earliest moment first
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto clamped = [&](std::size_t i) { return std::min(indices[i], events); };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return clamped(a) < clamped(b); });
  std::vector<std::size_t> ascending;
  for (std::size_t i : order) ascending.push_back(clamped(i));
  auto layouts = layouts_from(s, t, ascending, live_lifetimes(t, ascending));
  std::vector<DeviceLayout> out(indices.size());
  for (std::size_t k = 0; k < order.size(); ++k) out[order[k]] = std::move(layouts[k]);
  return out;
}

std::vector<DeviceLayout> layouts_before_ooms(const Snapshot& s, const DeviceTimeline& t) {
  return layouts_from(s, t, studied_oom_events(t), t.live_at_oom);
}

}  // namespace memsnap
