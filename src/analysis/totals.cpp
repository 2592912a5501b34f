// Totals per device and overall, and the backwards peak reconstruction memory_viz uses.
#include "analysis/totals.h"

#include <algorithm>
#include <map>

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
  if (t.peak_allocated) into.peak_allocated = std::max(into.peak_allocated.value_or(0), *t.peak_allocated);
  if (t.peak_reserved) into.peak_reserved = std::max(into.peak_reserved.value_or(0), *t.peak_reserved);
}

}  // namespace

std::optional<std::int64_t> peak_allocated(const DeviceTrace& trace, std::int64_t end_live) {
  if (trace.events.empty()) return std::nullopt;
  std::int64_t current = end_live;
  std::int64_t peak = current;
  for (auto it = trace.events.rbegin(); it != trace.events.rend(); ++it) {
    if (it->action == Action::Alloc) current -= static_cast<std::int64_t>(it->size);
    else if (it->action == Action::FreeCompleted) current += static_cast<std::int64_t>(it->size);
    else continue;
    peak = std::max(peak, current);
  }
  return peak;
}

std::optional<std::int64_t> peak_reserved(const DeviceTrace& trace, std::int64_t end_reserved) {
  if (trace.events.empty()) return std::nullopt;
  std::int64_t current = end_reserved;
  std::int64_t peak = current;
  for (auto it = trace.events.rbegin(); it != trace.events.rend(); ++it) {
    const auto size = static_cast<std::int64_t>(it->size);
    if (it->action == Action::SegmentAlloc || it->action == Action::SegmentMap) current -= size;
    else if (it->action == Action::SegmentFree || it->action == Action::SegmentUnmap) current += size;
    else continue;
    peak = std::max(peak, current);
  }
  return peak;
}

TotalsReport compute_totals(const Snapshot& snapshot) {
  std::map<std::int64_t, Totals> per_device;
  std::map<std::int64_t, std::int64_t> end_live;
  for (const Segment& seg : snapshot.segments) {
    Totals& t = per_device[seg.device];
    t.reserved += seg.total_size;
    ++t.segments;
    for (std::uint32_t i = 0; i < seg.block_count; ++i) {
      const Block& b = snapshot.blocks[seg.first_block + i];
      add_block(t, b);
      if (b.state == BlockState::ActiveAllocated || b.state == BlockState::ActivePendingFree) {
        end_live[seg.device] += static_cast<std::int64_t>(b.requested_size);
      }
    }
  }
  for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    const DeviceTrace& trace = snapshot.device_traces[d];
    const auto device = static_cast<std::int64_t>(d);
    if (trace.events.empty() && !per_device.count(device)) continue;
    Totals& t = per_device[device];
    t.peak_allocated = peak_allocated(trace, end_live[device]);
    t.peak_reserved = peak_reserved(trace, static_cast<std::int64_t>(t.reserved));
  }
  TotalsReport report;
  for (const auto& [device, t] : per_device) {
    report.devices.push_back({device, t});
    accumulate(report.overall, t);
  }
  return report;
}

}  // namespace memsnap
