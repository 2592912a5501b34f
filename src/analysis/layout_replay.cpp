// Backwards replay of one device's layout: undo alloc / free_completed on live blocks and
// segment_alloc / segment_free / segment_map / segment_unmap on the reserved ranges. Broken
// traces (unknown addresses, overlaps) are tolerated: nothing here can loop or overflow.
#include "analysis/layout_replay.h"

#include <algorithm>
#include <iterator>
#include <limits>

#include "analysis/fragmentation.h"

namespace memsnap {
namespace {

constexpr std::uint64_t kSmallBuffer = 2097152;  // small-pool segment size

}  // namespace

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  return a > kMax - b ? kMax : a + b;
}

LayoutReplay::LayoutReplay(const Snapshot& s, std::int64_t device) {
  static const TraceEvents kNone;
  const bool has_trace = device >= 0 && static_cast<std::size_t>(device) < s.device_traces.size();
  events_ = has_trace ? &s.device_traces[static_cast<std::size_t>(device)].events : &kNone;
  streams_ = &s.streams;
  cursor_ = events_->size();
  for (const Segment& seg : s.segments) {
    if (seg.device != device) continue;
    insert_range(seg.address, {saturating_add(seg.address, seg.total_size), seg.stream, seg.is_large});
    const std::size_t first = std::min<std::size_t>(seg.first_block, s.blocks.size());
    const std::size_t last = std::min<std::size_t>(first + seg.block_count, s.blocks.size());
    for (std::size_t i = first; i < last; ++i) {
      const Block& b = s.blocks[i];
      if (b.state == BlockState::ActiveAllocated || b.state == BlockState::ActivePendingFree) {
        live_[b.address] = {b.requested_size, b.size, b.stack};
      }
    }
  }
  final_ = segs_;
}

void LayoutReplay::undo_from(std::size_t index) {
  while (cursor_ > index) undo((*events_)[--cursor_]);
}

std::vector<std::pair<std::uint64_t, LayoutReplay::Live>> LayoutReplay::sorted_live() const {
  std::vector<std::pair<std::uint64_t, Live>> out(live_.begin(), live_.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

std::uint64_t LayoutReplay::reserved() const {
  std::uint64_t total = 0;
  for (const auto& [start, r] : segs_) total = saturating_add(total, r.end - start);
  return total;
}

std::uint64_t LayoutReplay::allocated() const {
  std::uint64_t total = 0;
  for (const auto& [addr, b] : live_) total = saturating_add(total, b.requested);
  return total;
}

// Undoes one event exactly like MemoryViz; unknown addresses are ignored.
void LayoutReplay::undo(const TraceEvent& e) {
  switch (e.action) {
    case Action::Alloc:
      live_.erase(e.addr);
      break;
    case Action::FreeCompleted:
      live_[e.addr] = {e.size, round_request(e.size), e.stack};
      break;
    case Action::SegmentAlloc:
      if (segs_.erase(e.addr) == 0) carve(e.addr, saturating_add(e.addr, e.size));
      break;
    case Action::SegmentMap:
      carve(e.addr, saturating_add(e.addr, e.size));
      break;
    case Action::SegmentFree:
      restore_segment(e, false);
      break;
    case Action::SegmentUnmap:
      restore_segment(e, true);
      break;
    default:
      break;  // free_requested, oom, snapshot, annotations: no layout change
  }
}

// Inserts a non-empty range; on a duplicate base address the longer range wins.
void LayoutReplay::insert_range(std::uint64_t addr, const Range& r) {
  if (r.end <= addr) return;
  auto [it, inserted] = segs_.emplace(addr, r);
  if (!inserted && r.end > it->second.end) it->second = r;
}

// Removes [begin, end) from every range overlapping it, keeping the pieces outside it.
void LayoutReplay::carve(std::uint64_t begin, std::uint64_t end) {
  if (begin >= end) return;
  auto it = segs_.upper_bound(begin);
  if (it != segs_.begin() && std::prev(it)->second.end > begin) --it;
  while (it != segs_.end() && it->first < end) {
    const std::uint64_t start = it->first;
    const Range r = it->second;
    it = segs_.erase(it);
    if (start < begin) insert_range(start, {begin, r.stream, r.is_large});
    if (r.end > end) insert_range(end, {r.end, r.stream, r.is_large});
  }
}

// Pool of a restored range: the final segment containing it, else by size (small = 2 MiB).
bool LayoutReplay::guess_large(std::uint64_t addr, std::uint64_t size) const {
  auto it = final_.upper_bound(addr);
  if (it != final_.begin() && addr < std::prev(it)->second.end) return std::prev(it)->second.is_large;
  return size > kSmallBuffer;
}

// Adds a freed/unmapped range back; for unmaps merges it with same-stream neighbours.
void LayoutReplay::restore_segment(const TraceEvent& e, bool merge) {
  const std::uint64_t end = saturating_add(e.addr, e.size);
  if (end <= e.addr) return;
  carve(e.addr, end);
  const std::int64_t stream = (*streams_)[e.stream_id];
  Range r{end, stream, guess_large(e.addr, e.size)};
  if (merge) {
    if (auto right = segs_.find(end); right != segs_.end() && right->second.stream == stream) {
      r.end = right->second.end;
      r.is_large = right->second.is_large;
      segs_.erase(right);
    }
    auto left = segs_.lower_bound(e.addr);
    if (left != segs_.begin() && std::prev(left)->second.end == e.addr && std::prev(left)->second.stream == stream) {
      std::prev(left)->second.end = r.end;
      return;
    }
  }
  insert_range(e.addr, r);
}

}  // namespace memsnap
