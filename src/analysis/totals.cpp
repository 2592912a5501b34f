// Totals per device and overall; the peaks come from the timelines (memory_viz's backwards
// reconstruction, analysis/timeline.cpp).
#include "analysis/totals.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace memsnap {
namespace {

void add_block(Totals& t, const Block& b) {
  ++t.blocks;
  switch (b.state) {
    case BlockState::ActiveAllocated:
      t.allocated += b.size;
      t.requested += b.requested_size;
      break;
    case BlockState::ActivePendingFree:
      t.pending_free += b.size;
      break;
    case BlockState::Inactive:
      t.inactive += b.size;
      t.largest_inactive_block = std::max(t.largest_inactive_block, b.size);
      ++t.inactive_blocks;
      break;
    case BlockState::Unknown:
      break;
  }
}

void accumulate(Totals& into, const Totals& t) {
  into.reserved += t.reserved;
  into.allocated += t.allocated;
  into.pending_free += t.pending_free;
  into.inactive += t.inactive;
  into.requested += t.requested;
  into.segments += t.segments;
  into.blocks += t.blocks;
  into.largest_inactive_block = std::max(into.largest_inactive_block, t.largest_inactive_block);
  into.segments_with_inactive += t.segments_with_inactive;
  into.inactive_blocks += t.inactive_blocks;
  into.inactive_in_free_segments += t.inactive_in_free_segments;
  into.free_segments += t.free_segments;
  into.largest_fragment = std::max(into.largest_fragment, t.largest_fragment);
  into.reserved_in_private_pools += t.reserved_in_private_pools;
  into.allocated_in_private_pools += t.allocated_in_private_pools;
  into.inactive_in_private_pools += t.inactive_in_private_pools;
  into.private_pools += t.private_pools;
  if (t.peak_allocated && (!into.peak_allocated || *t.peak_allocated > *into.peak_allocated)) {
    into.peak_allocated = t.peak_allocated;
    into.peak_certainty = t.peak_certainty;
  }
  if (t.peak_reserved && (!into.peak_reserved || *t.peak_reserved > *into.peak_reserved)) {
    into.peak_reserved = t.peak_reserved;
    into.reserved_peak_at_window_start = t.reserved_peak_at_window_start;
  }
}

}  // namespace

void add_segment(Totals& t, const Snapshot& snapshot, const Segment& seg) {
  t.reserved += seg.total_size;
  ++t.segments;
  Totals own;  // this segment's blocks alone, to tell a wholly free segment from a partly used one
  for (std::uint32_t i = 0; i < seg.block_count && seg.first_block + i < snapshot.blocks.size(); ++i) {
    add_block(own, snapshot.blocks[seg.first_block + i]);
  }
  accumulate(t, own);
  if (!seg.pool().is_default()) {
    t.reserved_in_private_pools += seg.total_size;
    t.allocated_in_private_pools += own.allocated;
    t.inactive_in_private_pools += own.inactive;
  }
  if (own.inactive_blocks) ++t.segments_with_inactive;
  if (own.inactive_blocks && own.inactive_blocks == own.blocks) {
    t.inactive_in_free_segments += own.inactive;
    ++t.free_segments;
  } else {
    t.largest_fragment = std::max(t.largest_fragment, own.largest_inactive_block);
  }
}

TotalsReport compute_totals(const Snapshot& snapshot, const std::vector<DeviceTimeline>& timelines) {
  std::map<std::int64_t, Totals> per_device;
  std::set<std::pair<std::int64_t, PoolId>> private_pools;
  for (const Segment& seg : snapshot.segments) {
    add_segment(per_device[seg.device], snapshot, seg);
    if (!seg.pool().is_default() && private_pools.emplace(seg.device, seg.pool()).second) ++per_device[seg.device].private_pools;
  }
  for (const DeviceTimeline& timeline : timelines) {
    Totals& t = per_device[timeline.device];
    t.peak_allocated = timeline.peak_allocated;
    t.peak_reserved = timeline.peak_reserved;
    t.peak_certainty = peak_certainty(timeline);
    t.reserved_peak_at_window_start = timeline.reserved_peak_at_window_start;
  }
  TotalsReport report;
  for (const auto& [device, t] : per_device) {
    report.devices.push_back({device, t});
    accumulate(report.overall, t);
  }
  return report;
}

}  // namespace memsnap
