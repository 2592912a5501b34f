// Allocator-level totals (reserved, allocated, pending free, inactive, requested, peaks) overall
// and per device, as defined in the report contract.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "analysis/timeline.h"
#include "model/snapshot.h"

namespace memsnap {

struct Totals {
  std::uint64_t reserved = 0;
  std::uint64_t allocated = 0;
  std::uint64_t pending_free = 0;
  std::uint64_t inactive = 0;
  std::uint64_t requested = 0;
  std::uint64_t segments = 0;
  std::uint64_t blocks = 0;
  std::uint64_t largest_inactive_block = 0;
  std::uint64_t segments_with_inactive = 0;  // segments holding at least one inactive block
  std::uint64_t inactive_blocks = 0;
  // `inactive` split by what the allocator can do with it: segments whose blocks are all
  // inactive are released (cudaFree) by torch.cuda.empty_cache() and before an OOM is raised;
  // the rest are fragments inside segments that still hold live blocks.
  std::uint64_t inactive_in_free_segments = 0;
  std::uint64_t free_segments = 0;
  std::uint64_t largest_fragment = 0;  // largest inactive block inside a partly used segment
  // Memory of segments in private pools (CUDA graphs, graph_pool_handle(), torch.cuda.MemPool;
  // segment_pool_id other than (0, 0)): reusable only by requests in the same pool, never by the
  // default pool, and not released by torch.cuda.empty_cache() while the pool is in use.
  std::uint64_t reserved_in_private_pools = 0;
  std::uint64_t allocated_in_private_pools = 0;
  std::uint64_t inactive_in_private_pools = 0;
  std::uint64_t private_pools = 0;  // distinct private pools (per device, summed)
  std::uint64_t fragments() const { return inactive - inactive_in_free_segments; }
  std::optional<std::int64_t> peak_allocated;  // null without trace history
  std::optional<std::int64_t> peak_reserved;
  PeakCertainty peak_certainty = PeakCertainty::InWindow;  // of peak_allocated (its device's)
  bool reserved_peak_at_window_start = false;
};

struct DeviceTotals {
  std::int64_t device = 0;
  Totals totals;
};

struct TotalsReport {
  Totals overall;
  std::vector<DeviceTotals> devices;  // devices with segments or trace events, ascending
};

// Adds one segment and its blocks to `t` (everything but the peaks).
void add_segment(Totals& t, const Snapshot& snapshot, const Segment& segment);

// The peaks per device are those of `timelines` (build_timelines): null without trace history.
TotalsReport compute_totals(const Snapshot& snapshot, const std::vector<DeviceTimeline>& timelines);

}  // namespace memsnap
