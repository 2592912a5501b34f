// Allocator-state analysis: inactive memory per (device, pool, stream), the layout before a trace
// event replayed backwards from the final state (MemoryViz simulate_memory, spec §11.1/§11.2),
// the largest reusable inactive block for a request (§12.4) and a verdict for each OOM (§12.5).
#include "analysis/fragmentation.h"

#include "analysis/layout_replay.h"

#include <algorithm>
#include <bit>
#include <iterator>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "base/format_bytes.h"
#include "base/plural.h"
#include "base/units.h"

namespace memsnap {
namespace {

constexpr std::uint64_t kMinBlockSize = 512;
constexpr std::uint64_t kSmallSize = 1048576;           // largest small-pool request
constexpr std::uint64_t kMaxNonSplitRounding = 20971520;  // default max_non_split_rounding
constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
// Live memory at this share of what the device had (reserved + free) leaves too little for any
// allocator setting to matter: the OOM is capacity whatever the fragments.
constexpr double kNearlyFull = 0.95;

std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) { return saturating_add(a, b); }

// Indices [first, last) of the blocks of `seg`, clamped to the snapshot's block array.
std::pair<std::size_t, std::size_t> block_range(const Snapshot& s, const Segment& seg) {
  const std::size_t first = std::min<std::size_t>(seg.first_block, s.blocks.size());
  const std::size_t last = std::min<std::size_t>(first + seg.block_count, s.blocks.size());
  return {first, last};
}

// max_split_size in bytes; -1, 0 or absent mean unlimited.
std::uint64_t max_split_bytes(const Snapshot& s) {
  const auto& v = s.settings.max_split_size;
  return v && *v > 0 ? static_cast<std::uint64_t>(*v) : kMax;
}

// §12.4 fits() without the size check: may a block of `block` bytes serve a `size` request?
bool split_rules_allow(std::uint64_t block, std::uint64_t size, std::uint64_t max_split) {
  if (size < max_split && block >= max_split) return false;
  if (size >= max_split && block >= sat_add(size, kMaxNonSplitRounding)) return false;
  return true;
}

// ---- Replayed layout -------------------------------------------------------------------------

// One maximal free range inside a segment (~ one inactive block).
struct Gap {
  std::uint64_t size = 0;
  std::int64_t stream = 0;
  bool is_large = true;
  PoolId pool;
  std::size_t segment = 0;   // ordinal of its segment in address order
  bool wholly_free = false;  // its segment holds no live block: released before an OOM is raised
};

std::vector<Gap> gaps_of(const DeviceLayout& replay) {
  std::vector<Gap> out;
  std::size_t ordinal = 0, segment_first_gap = 0;
  std::uint64_t current = kMax;
  bool segment_has_live = false;
  auto close_segment = [&] {
    for (std::size_t i = segment_first_gap; i < out.size(); ++i) out[i].wholly_free = !segment_has_live;
  };
  replay.for_each_piece([&](std::uint64_t start, const DeviceLayout::Range& r, std::uint64_t from, std::uint64_t to,
                            const DeviceLayout::Live* live) {
    if (start != current) {
      if (current != kMax) {
        close_segment();
        ++ordinal;
      }
      current = start;
      segment_first_gap = out.size();
      segment_has_live = false;
    }
    if (live) segment_has_live = true;
    else out.push_back({to - from, r.stream, r.is_large, r.pool, ordinal});
  });
  close_segment();
  return out;
}

// Totals of a replayed layout from its gaps.
Layout summarize(const DeviceLayout& replay, const std::vector<Gap>& gaps) {
  Layout l;
  l.replayed = true;
  l.reserved = replay.reserved();
  l.allocated = replay.allocated();
  std::size_t last_counted = kMax;
  for (const Gap& g : gaps) {
    l.inactive = sat_add(l.inactive, g.size);
    if (g.wholly_free) l.in_free_segments = sat_add(l.in_free_segments, g.size);
    l.largest_inactive_block = std::max(l.largest_inactive_block, g.size);
    if (g.size >= kMinBlockSize && g.segment != last_counted) {
      ++l.segments_with_inactive;
      last_counted = g.segment;
    }
  }
  l.inactive = std::min(l.inactive, l.reserved);
  l.in_free_segments = std::min(l.in_free_segments, l.inactive);
  return l;
}

// The final state of `device` straight from the snapshot's blocks (no trace to replay).
Layout final_layout(const Snapshot& s, std::int64_t device) {
  Layout l;
  for (const Segment& seg : s.segments) {
    if (seg.device != device) continue;
    l.reserved = sat_add(l.reserved, seg.total_size);
    bool has_inactive = false, has_live = false;
    std::uint64_t inactive = 0;
    const auto [first, last] = block_range(s, seg);
    for (std::size_t i = first; i < last; ++i) {
      const Block& b = s.blocks[i];
      if (b.state == BlockState::ActiveAllocated) l.allocated = sat_add(l.allocated, b.size);
      if (b.state != BlockState::Inactive) {
        has_live = true;
        continue;
      }
      inactive = sat_add(inactive, b.size);
      l.largest_inactive_block = std::max(l.largest_inactive_block, b.size);
      has_inactive = has_inactive || b.size > 0;
    }
    l.inactive = sat_add(l.inactive, inactive);
    if (!has_live) l.in_free_segments = sat_add(l.in_free_segments, inactive);
    if (has_inactive) ++l.segments_with_inactive;
  }
  return l;
}

// ---- OOM verdicts ----------------------------------------------------------------------------

// Inactive memory a request could look at: same pool and stream as the request.
struct PoolView {
  std::uint64_t largest_reusable = 0;  // honours max_split_size rules
  std::uint64_t inactive = 0;
  std::uint64_t fragments = 0;         // inactive bytes inside segments that also hold live blocks
  std::uint64_t segments = 0;          // segments with a gap >= 512 bytes
  std::uint64_t fragment_segments = 0; // of those, segments that also held live blocks
};

PoolView pool_view(const std::vector<Gap>& gaps, const OomEvent& oom, std::uint64_t max_split) {
  PoolView v;
  const bool want_large = oom.size > kSmallSize;
  std::size_t last_counted = kMax;
  for (const Gap& g : gaps) {
    if (g.is_large != want_large || g.stream != oom.stream || g.pool != oom.pool) continue;
    v.inactive = sat_add(v.inactive, g.size);
    if (!g.wholly_free) v.fragments = sat_add(v.fragments, g.size);
    if (split_rules_allow(g.size, oom.size, max_split)) v.largest_reusable = std::max(v.largest_reusable, g.size);
    if (g.size >= kMinBlockSize && g.segment != last_counted) {
      ++v.segments;
      if (!g.wholly_free) ++v.fragment_segments;
      last_counted = g.segment;
    }
  }
  return v;
}

std::string plural_segments(std::uint64_t n) { return fmt::format("{} segment{}", n, plural_s(n)); }

// Capacity when nothing could hold the request or live memory alone nearly fills the device;
// fragmentation when the request exceeds every reusable block although the fragments (free
// blocks inside partly used segments of its pool and stream; wholly free segments are released
// and retried before an OOM is raised) could hold it; capacity again when live memory dominates;
// else unclear.
// Memory other pools reserve is out of the request's reach: capacity and live memory are those
// of the request's own pool (the whole device when no other pool holds memory).
OomVerdict classify(const OomAnalysis& a, const PoolView& v) {
  const std::uint64_t size = a.event.size;
  const bool others = a.reserved_in_other_pools > 0;
  const double capacity = static_cast<double>(others ? a.reserved_in_pool : a.at_oom.reserved) + static_cast<double>(a.event.device_free);
  const double live = static_cast<double>(others ? a.allocated_in_pool : a.at_oom.allocated);
  if (live + static_cast<double>(size) > capacity || live >= kNearlyFull * capacity) return OomVerdict::Capacity;
  if (size > a.largest_reusable_block && v.fragments >= size) return OomVerdict::Fragmentation;
  if (a.process_limit || live >= 0.8 * capacity) return OomVerdict::Capacity;
  return OomVerdict::Unclear;
}

// What the inactive memory at a capacity OOM was, when there was any worth naming.
std::string inactive_clause(const Layout& at) {
  if (at.inactive < kMiB) return "";
  if (at.in_free_segments == 0) return fmt::format(" (not fragmentation: only {} was inactive then)", format_bytes(at.inactive));
  return fmt::format(" (not fragmentation: only {} was inactive then, {} of it in wholly free segments, which the allocator "
                     "releases and retries before raising an OOM)",
                     format_bytes(at.inactive), format_bytes(at.in_free_segments));
}

// What other memory pools held at the OOM, when any did: memory the request can never use.
std::string other_pools_clause(const OomAnalysis& a) {
  if (a.reserved_in_other_pools == 0) return "";
  return fmt::format("; {} more was reserved by {} ({} of it inactive), which a request in {} can never use: that memory "
                     "is freed only with the CUDA graphs or MemPool that own it",
                     format_bytes(a.reserved_in_other_pools), a.other_pools, format_bytes(a.inactive_in_other_pools),
                     pool_label(a.pool));
}

// The segment cudaMalloc would have been asked for (c10's get_allocation_size): 2 MiB for a small
// request, 20 MiB up to 10 MiB, else the request rounded up to 2 MiB.
std::uint64_t segment_for(std::uint64_t size) {
  constexpr std::uint64_t kRoundLarge = 2 * kMiB, kLargeBuffer = 20 * kMiB, kMinLargeAlloc = 10 * kMiB;
  if (size <= kSmallSize) return kRoundLarge;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return size > kMax - kRoundLarge ? kMax : (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

std::optional<OomAnalysis::ProcessLimit> process_limit(const OomEvent& oom, const Layout& at) {
  const std::uint64_t segment = segment_for(oom.size);
  if (oom.device_free < segment) return std::nullopt;
  return OomAnalysis::ProcessLimit{at.reserved, sat_add(at.reserved, segment)};
}

// The clause naming the process's own limit, when the device had room.
std::string limit_clause(const OomAnalysis& a) {
  if (!a.process_limit) return "";
  return fmt::format("; the device still had {} free, so this process hit its own limit "
                     "(torch.cuda.set_per_process_memory_fraction), between {} and {}",
                     format_bytes(a.event.device_free), format_bytes(a.process_limit->at_least), format_bytes(a.process_limit->below));
}

// One sentence citing the numbers behind the verdict.
std::string explain(const OomAnalysis& a, const PoolView& v) {
  const std::uint64_t size = a.event.size;
  if (a.verdict == OomVerdict::Capacity && a.process_limit && a.reserved_in_other_pools == 0) {
    return fmt::format("Live allocations of {} at the OOM leave no room for the failed request of {} under this process's memory "
                       "limit (torch.cuda.set_per_process_memory_fraction), which lay between {} and {}: the device still had {} "
                       "free; allocator tuning will not help{}",
                       format_bytes(a.at_oom.allocated), format_bytes(size), format_bytes(a.process_limit->at_least),
                       format_bytes(a.process_limit->below), format_bytes(a.event.device_free), inactive_clause(a.at_oom));
  }
  if (a.verdict == OomVerdict::Capacity && a.reserved_in_other_pools > 0) {
    return fmt::format("Live allocations of {} in {} at the OOM leave no room for the failed request of {}: {} was reserved "
                       "in that pool and {} was free on the device{}",
                       format_bytes(a.allocated_in_pool), pool_label(a.pool), format_bytes(size), format_bytes(a.reserved_in_pool),
                       format_bytes(a.event.device_free), other_pools_clause(a));
  }
  switch (a.verdict) {
    case OomVerdict::Fragmentation:
      return fmt::format(
          "The failed request of {} is larger than the largest reusable inactive block ({}) although {} was "
          "free in {} of the same pool and stream that also held live blocks",
          format_bytes(size), format_bytes(a.largest_reusable_block), format_bytes(v.fragments),
          plural_segments(v.fragment_segments)) + other_pools_clause(a) + limit_clause(a);
    case OomVerdict::Capacity:
      return fmt::format(
          "Live allocations of {} at the OOM leave no room for the failed request of {}: {} was reserved and {} "
          "was free on the device, so allocator tuning will not help{}",
          format_bytes(a.at_oom.allocated), format_bytes(size), format_bytes(a.at_oom.reserved),
          format_bytes(a.event.device_free), inactive_clause(a.at_oom));
    case OomVerdict::Unclear:
      break;
  }
  return fmt::format(
      "The failed request of {} is neither clearly fragmentation nor capacity: the largest reusable inactive "
      "block was {}, {} was inactive in the same pool and stream, and {} was live of {} reserved with {} free "
      "on the device{}",
      format_bytes(size), format_bytes(a.largest_reusable_block), format_bytes(v.inactive),
      format_bytes(a.at_oom.allocated), format_bytes(a.at_oom.reserved), format_bytes(a.event.device_free), other_pools_clause(a));
}

// Reserved and live bytes of the request's pool and of the other pools at the OOM.
void split_by_pool(OomAnalysis& a, const DeviceLayout& replay, const std::vector<Gap>& gaps) {
  std::map<PoolId, std::uint64_t> others;  // reserved by pool
  for (const auto& [start, r] : replay.segments) {
    const std::uint64_t bytes = r.end > start ? r.end - start : 0;
    if (r.pool == a.pool) a.reserved_in_pool = sat_add(a.reserved_in_pool, bytes);
    else others[r.pool] = sat_add(others[r.pool], bytes);
  }
  replay.for_each_piece([&](std::uint64_t, const DeviceLayout::Range& r, std::uint64_t, std::uint64_t, const DeviceLayout::Live* live) {
    if (live && r.pool == a.pool) a.allocated_in_pool = sat_add(a.allocated_in_pool, live->requested);
  });
  for (const Gap& g : gaps) {
    if (g.pool != a.pool) a.inactive_in_other_pools = sat_add(a.inactive_in_other_pools, g.size);
  }
  for (const auto& [pool, bytes] : others) {
    a.reserved_in_other_pools = sat_add(a.reserved_in_other_pools, bytes);
    a.other_pools += (a.other_pools.empty() ? "" : ", ") + pool_label(pool);
  }
}

// Verdict, suggestion and sentence for one OOM from the gaps of the layout before it.
OomAnalysis analyze_one(const OomEvent& oom, const Layout& layout, const DeviceLayout& replay, const std::vector<Gap>& gaps,
                        std::uint64_t max_split) {
  OomAnalysis a;
  a.event = oom;
  a.at_oom = layout;
  a.pool = oom.pool;
  split_by_pool(a, replay, gaps);
  const PoolView v = pool_view(gaps, oom, max_split);
  a.largest_reusable_block = v.largest_reusable;
  a.fragments_in_pool = v.fragments;
  a.process_limit = process_limit(oom, layout);
  a.verdict = classify(a, v);
  a.suggested_max_split_mb = std::max<std::uint64_t>(1, oom.size / kMiB + (oom.size % kMiB != 0 ? 1 : 0));
  a.reason = explain(a, v);
  return a;
}

}  // namespace

namespace {

// roundup_power2_divisions(size): the interval of log2(size) from 1 MiB (20) to 32 GiB and up.
std::uint32_t divisions_for(std::uint64_t bytes, const std::array<std::uint32_t, 16>& divisions) {
  const int log_size = 63 - std::countl_zero(bytes);
  const int index = std::clamp(log_size - 20, 0, static_cast<int>(divisions.size()) - 1);
  return divisions[static_cast<std::size_t>(index)];
}

// roundup_power2_next_division: the next of `n` equal steps between the powers of two around it.
std::uint64_t next_power2_division(std::uint64_t bytes, std::uint64_t n) {
  if (bytes <= 4 || n <= 1 || std::has_single_bit(bytes)) return bytes;
  const std::uint64_t floor = std::bit_floor(bytes);
  const std::uint64_t step = floor >> (63 - std::countl_zero(n));
  if (step == 0) return floor << 1;
  const std::uint64_t down = bytes & ~(step - 1);
  return down == bytes ? bytes : down + step;
}

}  // namespace

std::uint64_t round_request(std::uint64_t bytes, const std::array<std::uint32_t, 16>& divisions) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  if (const std::uint64_t n = divisions_for(bytes, divisions); n > 1 && bytes > kMinBlockSize * n) {
    return next_power2_division(bytes, n);
  }
  const std::uint64_t rounded = bytes + (kMinBlockSize - 1);
  if (rounded < bytes) return kMax - kMax % kMinBlockSize;  // would overflow
  return rounded / kMinBlockSize * kMinBlockSize;
}

std::vector<PoolStreamFree> free_by_pool_and_stream(const Snapshot& snapshot) {
  std::map<std::tuple<std::int64_t, PoolId, bool, std::int64_t>, PoolStreamFree> groups;  // (device, pool, !large, stream)
  for (const Segment& seg : snapshot.segments) {
    PoolStreamFree& g = groups[{seg.device, seg.pool(), !seg.is_large, seg.stream}];
    g.device = seg.device;
    g.pool = seg.pool();
    g.is_large = seg.is_large;
    g.stream = seg.stream;
    add_segment(g.totals, snapshot, seg);
  }
  std::vector<PoolStreamFree> out;
  out.reserve(groups.size());
  for (auto& [key, g] : groups) out.push_back(g);
  return out;
}

Layout layout_before_event(const Snapshot& snapshot, std::int64_t device, std::size_t event_index) {
  if (snapshot.events_of(device).empty()) return final_layout(snapshot, device);
  for (const DeviceTimeline& t : build_timelines(snapshot)) {
    if (t.device != device) continue;
    const DeviceLayout layout = std::move(layouts_before(snapshot, t, {event_index}).front());
    return summarize(layout, gaps_of(layout));
  }
  return final_layout(snapshot, device);
}

// Per device, the layouts before its OOMs from the segment events and the lifetimes.
std::vector<OomAnalysis> analyze_ooms(const Snapshot& snapshot, const TraceSummary& trace,
                                      const std::vector<DeviceTimeline>& timelines) {
  std::vector<OomAnalysis> out(trace.ooms.size());
  std::map<std::pair<std::int64_t, std::size_t>, std::size_t> position;  // (device, event index) -> in trace.ooms
  for (std::size_t k = 0; k < trace.ooms.size(); ++k) {
    position.emplace(std::make_pair(trace.ooms[k].device, trace.ooms[k].index), k);
    out[k].event = trace.ooms[k];
    out[k].studied = false;
  }
  const std::uint64_t max_split = max_split_bytes(snapshot);
  for (const DeviceTimeline& t : timelines) {
    const std::vector<DeviceLayout> layouts = layouts_before_ooms(snapshot, t);
    for (std::size_t i = 0; i < layouts.size(); ++i) {
      const auto it = position.find({t.device, studied_oom_event(t, i)});
      if (it == position.end()) continue;
      const std::vector<Gap> gaps = gaps_of(layouts[i]);
      Layout layout = summarize(layouts[i], gaps);
      out[it->second] = analyze_one(trace.ooms[it->second], layout, layouts[i], gaps, max_split);
    }
  }
  return out;
}

}  // namespace memsnap
