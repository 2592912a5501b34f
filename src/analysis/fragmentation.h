// Allocator-state questions: the largest inactive block a request could reuse (honouring pools,
// streams and max_split_size), the layout at an OOM replayed backwards from the final state,
// and the verdict for each OOM (fragmentation versus capacity).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/enum_names.h"
#include "analysis/timeline.h"
#include "analysis/totals.h"
#include "analysis/trace_summary.h"
#include "model/snapshot.h"

namespace memsnap {

// PyTorch's CUDACachingAllocator::round_size: at least 512 bytes, multiples of 512; with
// roundup_power2_divisions n > 1 for the size's interval and a size above 512 * n, the next of n
// equal divisions between the powers of two around it (roundup_power2_next_division).
std::uint64_t round_request(std::uint64_t bytes, const std::array<std::uint32_t, 16>& divisions = {});

// Totals and inactive memory of one (device, memory pool, segment type, stream) group (no peaks:
// the trace does not say which pool a segment event belongs to before 2026).
struct PoolStreamFree {
  std::int64_t device = 0;
  PoolId pool;           // segment_pool_id: default, CUDA graph or MemPool
  bool is_large = true;  // segment_type
  std::int64_t stream = 0;
  Totals totals;
};

// For every group present in the snapshot (sorted by device, memory pool (default first),
// segment type (large first), stream).
std::vector<PoolStreamFree> free_by_pool_and_stream(const Snapshot& snapshot);

// The allocator layout at one moment: blocks per segment after undoing later trace events.
struct Layout {
  std::uint64_t allocated = 0;  // live requested bytes as replayed (trace sizes)
  std::uint64_t reserved = 0;
  std::uint64_t inactive = 0;   // reserved minus live and pending blocks
  std::uint64_t in_free_segments = 0;  // the part of `inactive` in segments with no live block
  std::uint64_t largest_inactive_block = 0;
  std::uint64_t segments_with_inactive = 0;
  bool replayed = false;        // false: the final state is used (no trace to replay)
};

// The layout of `device` just before trace event `event_index` (of the kept events), replayed
// backwards from the final state as memory_viz's "Allocator State History" does.
Layout layout_before_event(const Snapshot& snapshot, std::int64_t device, std::size_t event_index);

enum class OomVerdict { Fragmentation, Capacity, Unclear };
template <>
struct EnumNames<OomVerdict> {
  static constexpr std::array<std::string_view, 3> names = {"fragmentation", "capacity", "unclear"};
};
inline const char* oom_verdict_name(OomVerdict v) { return name_of(v).data(); }

struct OomAnalysis {
  OomEvent event;
  // False for an OOM between the first and the last studied ones of a device with more than
  // kStudiedOomsPerDevice (timeline.h): only `event` is filled.
  bool studied = true;
  Layout at_oom;
  // Largest inactive block the failed request could have used (same device, pool, stream,
  // max_split_size rules), from the layout at the OOM.
  std::uint64_t largest_reusable_block = 0;
  // Inactive bytes of that pool and stream inside segments that also held live blocks: what
  // better packing could have given the request (wholly free segments are released first).
  std::uint64_t fragments_in_pool = 0;
  // The memory pool of the request (the oom entry's pool_id, else the default pool) and what
  // other pools (CUDA graphs, MemPools) held at the OOM: memory this request can never use.
  PoolId pool;
  std::uint64_t reserved_in_pool = 0;
  std::uint64_t allocated_in_pool = 0;
  std::uint64_t reserved_in_other_pools = 0;
  std::uint64_t inactive_in_other_pools = 0;
  std::string other_pools;  // their labels, "CUDA graph private pool (1,0)", ", "-joined
  // Set when the device still had room for the segment the request needed (device_free >= it):
  // cudaMalloc was not what failed, so the allocator refused the request against this process's
  // own limit (torch.cuda.set_per_process_memory_fraction), which the snapshot does not record but
  // these bounds bracket: at least what was reserved at the OOM, below that plus the segment.
  struct ProcessLimit {
    std::uint64_t at_least = 0, below = 0;
  };
  std::optional<ProcessLimit> process_limit;
  OomVerdict verdict = OomVerdict::Unclear;
  std::uint64_t suggested_max_split_mb = 0;  // for max_split_size_mb:<N>, from the request
  std::string reason;                         // one sentence citing the numbers
  std::vector<Site> sites_before;             // live sites just before it (filled by measure())
};

// One analysis per entry of trace.ooms (summarize_trace of the same timelines), from the
// layouts before them; the OOMs a device does not study have only their event.
std::vector<OomAnalysis> analyze_ooms(const Snapshot& snapshot, const TraceSummary& trace,
                                      const std::vector<DeviceTimeline>& timelines);

}  // namespace memsnap
