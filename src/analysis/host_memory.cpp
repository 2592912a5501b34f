// Host (pinned) memory: totals from the host segments, sites from their live blocks, and the peak
// reconstructed backwards from the live total at the end, as the device timelines are.
#include "analysis/host_memory.h"

#include <algorithm>
#include <cstdint>

namespace memsnap {
namespace {

// + bytes an event makes live, - bytes it frees, 0 for the rest.
std::int64_t host_live_delta(const TraceEvent& e) {
  const auto bytes = static_cast<std::int64_t>(std::min<std::uint64_t>(e.size, INT64_MAX));
  if (e.action == Action::Alloc) return bytes;
  if (e.action == Action::FreeCompleted) return -bytes;
  return 0;
}

// Live bytes after each event, walked backwards from the end's live total; the peak is the
// largest (clamped at zero: a trace that starts mid-run frees memory allocated before it).
void host_peak(const Snapshot& s, HostMemoryReport& r) {
  const auto& events = s.host.events;
  if (events.empty()) return;
  std::int64_t live = static_cast<std::int64_t>(r.totals.requested);
  std::int64_t best = live;
  std::size_t best_index = events.size();
  for (std::size_t i = events.size(); i-- > 0;) {
    live -= host_live_delta(events[i]);
    if (live >= best) {  // the earliest moment of the peak
      best = live;
      best_index = i;
    }
  }
  r.peak_live = static_cast<std::uint64_t>(std::max<std::int64_t>(0, best));
  r.peak_index = best_index;
}

}  // namespace

HostMemoryReport analyze_host_memory(const Snapshot& s) {
  HostMemoryReport r;
  r.present = s.host.present;
  if (!r.present) return r;
  std::vector<LiveItem> items;
  for (const Segment& seg : s.host.segments) {
    r.totals.reserved += seg.total_size;
    ++r.totals.segments;
    for (std::uint32_t i = 0; i < seg.block_count && seg.first_block + i < s.host.blocks.size(); ++i) {
      const Block& b = s.host.blocks[seg.first_block + i];
      ++r.totals.blocks;
      if (b.state == BlockState::ActiveAllocated) {
        items.push_back({b.stack, b.size, b.requested_size});
        r.totals.allocated += b.size;
        r.totals.requested += b.requested_size;
      } else if (b.state == BlockState::Inactive) {
        r.totals.inactive += b.size;
      } else if (b.state == BlockState::ActivePendingFree) {
        r.totals.pending_free += b.size;
      }
    }
  }
  r.sites = attribute(s, items);
  r.events = s.host.events.size();
  host_peak(s, r);
  return r;
}

}  // namespace memsnap
