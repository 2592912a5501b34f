// Fragmentation analysis on hand-built snapshots: request rounding, inactive memory per pool and
// stream, the backwards layout replay (frees, segment_alloc, expandable map/unmap merging), the
// largest reusable block under pool/stream/max_split_size rules, OOM verdicts, broken traces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "analysis/analyze.h"
#include "analysis/fragmentation.h"
#include "analysis/trace_summary.h"

namespace memsnap {
namespace fragmentation_tests {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
constexpr std::uint64_t GiB = 1024 * MiB;
constexpr std::uint64_t kBase = 0x7f0000000000ull;

struct BlockSpec {
  std::uint64_t size;
  BlockState state;
  std::uint64_t requested = 0;  // 0: same as size for live blocks
};

// Builds a Snapshot by hand: segments tiled by blocks, per-device trace events.
struct SnapshotBuilder {
  Snapshot s;

  SnapshotBuilder() { s.strings = {""}; }

  void segment(std::uint64_t addr, const std::vector<BlockSpec>& blocks, std::int64_t stream = 0,
               bool is_large = true, std::int64_t device = 0) {
    Segment seg;
    seg.device = device;
    seg.address = addr;
    seg.stream = stream;
    seg.is_large = is_large;
    seg.first_block = static_cast<std::uint32_t>(s.blocks.size());
    seg.block_count = static_cast<std::uint32_t>(blocks.size());
    std::uint64_t next = addr;
    for (const BlockSpec& spec : blocks) {
      Block b;
      b.address = next;
      b.size = spec.size;
      b.state = spec.state;
      b.requested_size = spec.state == BlockState::Inactive ? 0 : (spec.requested ? spec.requested : spec.size);
      s.blocks.push_back(b);
      next += spec.size;
      seg.total_size += spec.size;
    }
    s.segments.push_back(seg);
  }

  void event(Action action, std::uint64_t addr, std::uint64_t size, std::int64_t stream = 0,
             std::int64_t device = 0) {
    if (s.device_traces.size() <= static_cast<std::size_t>(device)) s.device_traces.resize(device + 1);
    TraceEvent e;
    e.action = action;
    e.addr = addr;
    e.size = size;
    e.stream_id = s.stream_id(stream);
    DeviceTrace& t = s.device_traces[static_cast<std::size_t>(device)];
    t.events.push_back(e);
    t.total = t.events.size();
  }

  // An oom entry: `addr` holds device_free.
  void oom(std::uint64_t size, std::uint64_t device_free, std::int64_t stream = 0) {
    event(Action::Oom, device_free, size, stream);
  }

  std::vector<OomAnalysis> analyze() const {
    const auto timelines = build_timelines(s);
    return analyze_ooms(s, summarize_trace(s, timelines), timelines);
  }
};

constexpr BlockState kLive = BlockState::ActiveAllocated;
constexpr BlockState kPending = BlockState::ActivePendingFree;
constexpr BlockState kFree = BlockState::Inactive;

// The ids of the patterns the whole analysis finds on `s`.
std::vector<std::string> pattern_ids(const Snapshot& s) {
  LoadedSnapshot loaded;
  loaded.snapshot = s;
  std::vector<std::string> ids;
  for (const Pattern& p : analyze(loaded).patterns) ids.emplace_back(name_of(p.id));
  return ids;
}

TEST(Fragmentation, RoundRequest) {
  EXPECT_EQ(round_request(0), 512u);
  EXPECT_EQ(round_request(1), 512u);
  EXPECT_EQ(round_request(512), 512u);
  EXPECT_EQ(round_request(513), 1024u);
  EXPECT_EQ(round_request(MiB + 1), MiB + 512);
  EXPECT_EQ(round_request(std::numeric_limits<std::uint64_t>::max()) % 512, 0u);
}

TEST(Fragmentation, VerdictNames) {
  EXPECT_STREQ(oom_verdict_name(OomVerdict::Fragmentation), "fragmentation");
  EXPECT_STREQ(oom_verdict_name(OomVerdict::Capacity), "capacity");
  EXPECT_STREQ(oom_verdict_name(OomVerdict::Unclear), "unclear");
}

TEST(Fragmentation, FreeByPoolAndStream) {
  SnapshotBuilder b;
  b.segment(kBase, {{4 * MiB, kLive}, {6 * MiB, kFree}, {2 * MiB, kLive}, {8 * MiB, kFree}});  // large, s0
  b.segment(kBase + 20 * MiB, {{20 * MiB, kLive}});                                             // large, s0
  b.segment(kBase + 40 * MiB, {{MiB, kFree}, {MiB, kPending}}, 0, false);                       // small, s0
  b.segment(kBase + 42 * MiB, {{30 * MiB, kFree}}, 7);                                          // large, s7
  b.segment(kBase, {{2 * MiB, kFree}}, 0, false, 1);                                            // device 1
  const auto groups = free_by_pool_and_stream(b.s);
  ASSERT_EQ(groups.size(), 4u);

  EXPECT_EQ(groups[0].device, 0);
  EXPECT_TRUE(groups[0].is_large);
  EXPECT_EQ(groups[0].stream, 0);
  EXPECT_EQ(groups[0].totals.inactive, 14 * MiB);
  EXPECT_EQ(groups[0].totals.largest_inactive_block, 8 * MiB);
  EXPECT_EQ(groups[0].totals.segments, 2u);
  EXPECT_EQ(groups[0].totals.segments_with_inactive, 1u);
  EXPECT_EQ(groups[0].totals.inactive_blocks, 2u);

  EXPECT_TRUE(groups[1].is_large);
  EXPECT_EQ(groups[1].stream, 7);
  EXPECT_EQ(groups[1].totals.inactive, 30 * MiB);
  EXPECT_EQ(groups[1].totals.segments_with_inactive, 1u);

  EXPECT_FALSE(groups[2].is_large);
  EXPECT_EQ(groups[2].device, 0);
  EXPECT_EQ(groups[2].totals.inactive, MiB);  // the pending-free block is not inactive
  EXPECT_EQ(groups[2].totals.inactive_blocks, 1u);

  EXPECT_EQ(groups[3].device, 1);
  EXPECT_FALSE(groups[3].is_large);
  EXPECT_EQ(groups[3].totals.inactive, 2 * MiB);
}

TEST(Fragmentation, FinalStateWithoutTrace) {
  SnapshotBuilder b;
  b.segment(kBase, {{4 * MiB, kLive, 3 * MiB}, {6 * MiB, kFree}, {2 * MiB, kPending}, {8 * MiB, kFree}});
  b.segment(kBase + 20 * MiB, {{2 * MiB, kLive}}, 0, false);
  const Layout l = layout_before_event(b.s, 0, 0);
  EXPECT_FALSE(l.replayed);
  EXPECT_EQ(l.reserved, 22 * MiB);
  EXPECT_EQ(l.allocated, 6 * MiB);  // block sizes of active_allocated
  EXPECT_EQ(l.inactive, 14 * MiB);
  EXPECT_EQ(l.largest_inactive_block, 8 * MiB);
  EXPECT_EQ(l.segments_with_inactive, 1u);
  EXPECT_EQ(layout_before_event(b.s, 3, 0).reserved, 0u);  // unknown device
}

// Four 20 MiB segments, each split into 12 MiB live + 8 MiB inactive; a 16 MiB request fails
// with `device_free` free on the device.
std::vector<OomAnalysis> split_segments_oom(std::uint64_t device_free) {
  SnapshotBuilder b;
  for (int i = 0; i < 4; ++i) {
    const std::uint64_t addr = kBase + i * 20 * MiB;
    b.segment(addr, {{12 * MiB, kLive}, {8 * MiB, kFree}});
    b.event(Action::SegmentAlloc, addr, 20 * MiB);
    b.event(Action::Alloc, addr, 12 * MiB);
  }
  b.oom(16 * MiB, device_free);
  return b.analyze();
}

// One 60 MiB segment, 58 MiB of it live; a request of `request` fails with `device_free` free.
std::vector<OomAnalysis> nearly_full_segment_oom(std::uint64_t request, std::uint64_t device_free) {
  SnapshotBuilder b;
  b.segment(kBase, {{58 * MiB, kLive}, {2 * MiB, kFree}});
  b.event(Action::Alloc, kBase, 58 * MiB);
  b.oom(request, device_free);
  return b.analyze();
}

// The one OOM of `result` has `verdict` and a process limit in [at_least, below).
void expect_under_limit(const std::vector<OomAnalysis>& result, OomVerdict verdict, std::uint64_t at_least, std::uint64_t below) {
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].verdict, verdict);
  ASSERT_TRUE(result[0].process_limit);
  EXPECT_EQ(result[0].process_limit->at_least, at_least);
  EXPECT_EQ(result[0].process_limit->below, below);
}

TEST(Fragmentation, OomFromSplitSegments) {
  const auto result = split_segments_oom(8 * MiB);
  ASSERT_EQ(result.size(), 1u);
  const OomAnalysis& a = result[0];
  EXPECT_EQ(a.event.index, 8u);
  EXPECT_FALSE(a.process_limit);  // 8 MiB free on the device: less than the 16 MiB segment
  EXPECT_TRUE(a.at_oom.replayed);
  EXPECT_EQ(a.at_oom.reserved, 80 * MiB);
  EXPECT_EQ(a.at_oom.allocated, 48 * MiB);
  EXPECT_EQ(a.at_oom.inactive, 32 * MiB);
  EXPECT_EQ(a.at_oom.largest_inactive_block, 8 * MiB);
  EXPECT_EQ(a.at_oom.segments_with_inactive, 4u);
  EXPECT_EQ(a.largest_reusable_block, 8 * MiB);
  EXPECT_EQ(a.verdict, OomVerdict::Fragmentation);
  EXPECT_EQ(a.suggested_max_split_mb, 16u);
  EXPECT_EQ(a.reason,
            "The failed request of 16.00 MiB is larger than the largest reusable inactive block (8.00 MiB) "
            "although 32.00 MiB was free in 4 segments of the same pool and stream that also held live blocks");
}

// The same layout with 10 GiB free on the device: cudaMalloc could have given the 16 MiB segment, so
// the process's own limit (set_per_process_memory_fraction) refused it; it lay in [80, 96) MiB.
TEST(Fragmentation, FragmentsUnderAProcessLimit) {
  const auto result = split_segments_oom(10 * GiB);
  expect_under_limit(result, OomVerdict::Fragmentation, 80 * MiB, 96 * MiB);  // the fragments could have held it
  EXPECT_EQ(result[0].reason,
            "The failed request of 16.00 MiB is larger than the largest reusable inactive block (8.00 MiB) "
            "although 32.00 MiB was free in 4 segments of the same pool and stream that also held live blocks; the device "
            "still had 10.00 GiB free, so this process hit its own limit (torch.cuda.set_per_process_memory_fraction), "
            "between 80.00 MiB and 96.00 MiB");
}

// Live memory fills what the process may reserve while the device has room: capacity under the
// process's limit, which lies between what was reserved and that plus the segment the request
// needed (a 3 MiB request asks cudaMalloc for 20 MiB).
TEST(Fragmentation, CapacityUnderAProcessLimit) {
  const auto result = nearly_full_segment_oom(3 * MiB, 40 * GiB);
  expect_under_limit(result, OomVerdict::Capacity, 60 * MiB, 80 * MiB);
  EXPECT_EQ(result[0].reason,
            "Live allocations of 58.00 MiB at the OOM leave no room for the failed request of 3.00 MiB under this process's "
            "memory limit (torch.cuda.set_per_process_memory_fraction), which lay between 60.00 MiB and 80.00 MiB: the device "
            "still had 40.00 GiB free; allocator tuning will not help (not fragmentation: only 2.00 MiB was inactive then)");
}

// Live memory fills the device: 58 MiB live of 60 MiB reserved and 1 MiB free.
TEST(Fragmentation, CapacityOom) {
  const auto result = nearly_full_segment_oom(10 * MiB + 512, MiB);
  ASSERT_EQ(result.size(), 1u);
  const OomAnalysis& a = result[0];
  EXPECT_EQ(a.largest_reusable_block, 2 * MiB);
  EXPECT_EQ(a.at_oom.allocated, 58 * MiB);
  EXPECT_EQ(a.verdict, OomVerdict::Capacity);
  EXPECT_EQ(a.suggested_max_split_mb, 11u);
  EXPECT_EQ(a.reason,
            "Live allocations of 58.00 MiB at the OOM leave no room for the failed request of 10.00 MiB: "
            "60.00 MiB was reserved and 1.00 MiB was free on the device, so allocator tuning will not help "
            "(not fragmentation: only 2.00 MiB was inactive then)");
}

// The OOM happened before a block was freed and a second segment was allocated: the layout at the
// OOM differs from the final one. Requested sizes that are not multiples of 512 occupy rounded bytes.
TEST(Fragmentation, ReplayUndoesFreesAndSegmentAlloc) {
  const std::uint64_t a = kBase, seg_b = kBase + 0x10000000;
  SnapshotBuilder b;
  b.segment(a, {{4 * MiB, kLive}, {16 * MiB, kFree}});
  b.segment(seg_b, {{2 * MiB, kLive}, {18 * MiB, kFree}});
  b.event(Action::Alloc, a, 4 * MiB);                        // 0
  b.event(Action::Alloc, a + 4 * MiB, 6 * MiB - 100);        // 1
  b.oom(12 * MiB, 0);                                        // 2
  b.event(Action::FreeRequested, a + 4 * MiB, 6 * MiB - 100);  // 3
  b.event(Action::FreeCompleted, a + 4 * MiB, 6 * MiB - 100);  // 4
  b.event(Action::SegmentAlloc, seg_b, 20 * MiB);            // 5
  b.event(Action::Alloc, seg_b, 2 * MiB);                    // 6

  const Layout end = layout_before_event(b.s, 0, 7);
  EXPECT_TRUE(end.replayed);
  EXPECT_EQ(end.reserved, 40 * MiB);
  EXPECT_EQ(end.allocated, 6 * MiB);
  EXPECT_EQ(end.inactive, 34 * MiB);
  EXPECT_EQ(end.largest_inactive_block, 18 * MiB);
  EXPECT_EQ(end.segments_with_inactive, 2u);

  const Layout before_segment = layout_before_event(b.s, 0, 5);
  EXPECT_EQ(before_segment.reserved, 20 * MiB);
  EXPECT_EQ(before_segment.allocated, 4 * MiB);
  EXPECT_EQ(before_segment.largest_inactive_block, 16 * MiB);

  const Layout at_oom = layout_before_event(b.s, 0, 2);
  EXPECT_EQ(at_oom.reserved, 20 * MiB);
  EXPECT_EQ(at_oom.allocated, 10 * MiB - 100);
  EXPECT_EQ(at_oom.inactive, 10 * MiB);
  EXPECT_EQ(at_oom.largest_inactive_block, 10 * MiB);
  EXPECT_EQ(at_oom.segments_with_inactive, 1u);

  const Layout start = layout_before_event(b.s, 0, 0);
  EXPECT_EQ(start.allocated, 0u);
  EXPECT_EQ(start.inactive, 20 * MiB);

  const auto result = b.analyze();
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].at_oom.largest_inactive_block, 10 * MiB);
  EXPECT_EQ(result[0].largest_reusable_block, 10 * MiB);
  // 10 MiB inactive < 12 MiB and live + request exceed reserved + device_free.
  EXPECT_EQ(result[0].verdict, OomVerdict::Capacity);
}

// Expandable segments: undoing an unmap merges the range with its same-stream neighbours, undoing
// a map carves it out (splitting the segment in two when it was mapped in the middle).
TEST(Fragmentation, ExpandableMapUnmapMerging) {
  const std::uint64_t x = kBase;
  SnapshotBuilder b;
  b.s.settings.expandable_segments = true;
  b.segment(x, {{20 * MiB, kLive}});
  b.segment(x + 40 * MiB, {{20 * MiB, kLive}});
  b.event(Action::SegmentMap, x, 20 * MiB);                // 0
  b.event(Action::SegmentMap, x + 40 * MiB, 20 * MiB);     // 1
  b.event(Action::SegmentMap, x + 20 * MiB, 20 * MiB);     // 2
  b.event(Action::Alloc, x, 20 * MiB);                     // 3
  b.event(Action::Alloc, x + 20 * MiB, 20 * MiB);          // 4
  b.event(Action::Alloc, x + 40 * MiB, 20 * MiB);          // 5
  b.event(Action::FreeCompleted, x + 20 * MiB, 20 * MiB);  // 6
  b.oom(30 * MiB, 0);                                      // 7
  b.event(Action::SegmentUnmap, x + 20 * MiB, 20 * MiB);   // 8

  const Layout at_oom = layout_before_event(b.s, 0, 7);
  EXPECT_EQ(at_oom.reserved, 60 * MiB);
  EXPECT_EQ(at_oom.allocated, 40 * MiB);
  EXPECT_EQ(at_oom.largest_inactive_block, 20 * MiB);
  EXPECT_EQ(at_oom.segments_with_inactive, 1u);

  const Layout mapped = layout_before_event(b.s, 0, 3);  // one merged 60 MiB segment, empty
  EXPECT_EQ(mapped.reserved, 60 * MiB);
  EXPECT_EQ(mapped.allocated, 0u);
  EXPECT_EQ(mapped.largest_inactive_block, 60 * MiB);
  EXPECT_EQ(mapped.segments_with_inactive, 1u);

  const Layout split = layout_before_event(b.s, 0, 2);  // middle map undone: two 20 MiB ranges
  EXPECT_EQ(split.reserved, 40 * MiB);
  EXPECT_EQ(split.largest_inactive_block, 20 * MiB);
  EXPECT_EQ(split.segments_with_inactive, 2u);

  EXPECT_EQ(layout_before_event(b.s, 0, 0).reserved, 0u);

  const auto result = b.analyze();
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].largest_reusable_block, 20 * MiB);
  EXPECT_NE(result[0].verdict, OomVerdict::Fragmentation);  // only 20 MiB inactive for 30 MiB
}

// Unmapped ranges on another stream are restored without merging.
TEST(Fragmentation, UnmapMergeNeedsSameStream) {
  SnapshotBuilder b;
  b.segment(kBase, {{20 * MiB, kFree}}, 1);
  b.event(Action::SegmentUnmap, kBase + 20 * MiB, 20 * MiB, 2);
  const Layout l = layout_before_event(b.s, 0, 0);
  EXPECT_EQ(l.reserved, 40 * MiB);
  EXPECT_EQ(l.largest_inactive_block, 20 * MiB);
  EXPECT_EQ(l.segments_with_inactive, 2u);
}

// Oversize (>= max_split_size) blocks, other streams and the other pool do not count.
TEST(Fragmentation, PoolStreamAndMaxSplitFiltering) {
  SnapshotBuilder b;
  b.s.settings.present = true;
  b.s.settings.max_split_size = 64 * MiB;
  b.segment(kBase, {{10 * MiB, kLive}, {90 * MiB, kFree}});                // large s0, oversize block
  b.segment(kBase + 100 * MiB, {{4 * MiB, kLive}, {16 * MiB, kFree}});     // large s0
  b.segment(kBase + 120 * MiB, {{60 * MiB, kFree}}, 5);                    // large, other stream
  b.segment(kBase + 180 * MiB, {{512 * KiB, kLive}, {1536 * KiB, kFree}}, 0, false);  // small s0
  b.oom(30 * MiB, 0);        // 0: < max_split: the 90 MiB block is reserved for big requests
  b.oom(66 * MiB, 0);        // 1: >= max_split: 90 MiB >= 66 + 20 MiB is too big to round
  b.oom(80 * MiB, 0);        // 2: 90 MiB < 80 + 20 MiB may serve it
  b.oom(512 * KiB, 0);       // 3: small pool only
  b.oom(30 * MiB, 0, 5);     // 4: stream 5 only
  auto result = b.analyze();
  ASSERT_EQ(result.size(), 5u);
  EXPECT_EQ(result[0].largest_reusable_block, 16 * MiB);
  EXPECT_EQ(result[0].verdict, OomVerdict::Fragmentation);
  EXPECT_EQ(result[0].reason,
            "The failed request of 30.00 MiB is larger than the largest reusable inactive block (16.00 MiB) "
            "although 106.00 MiB was free in 2 segments of the same pool and stream that also held live blocks");
  EXPECT_EQ(result[1].largest_reusable_block, 16 * MiB);
  EXPECT_EQ(result[1].verdict, OomVerdict::Fragmentation);
  EXPECT_EQ(result[2].largest_reusable_block, 90 * MiB);
  EXPECT_EQ(result[2].verdict, OomVerdict::Unclear);
  EXPECT_EQ(result[3].largest_reusable_block, 1536 * KiB);
  EXPECT_EQ(result[3].suggested_max_split_mb, 1u);
  EXPECT_EQ(result[4].largest_reusable_block, 60 * MiB);
  EXPECT_EQ(result[4].verdict, OomVerdict::Unclear);
  for (const auto& a : result) EXPECT_EQ(a.at_oom.reserved, 182 * MiB);

  b.s.settings.max_split_size = -1;  // unlimited: the 90 MiB block serves the 30 MiB request
  result = b.analyze();
  EXPECT_EQ(result[0].largest_reusable_block, 90 * MiB);
  EXPECT_EQ(result[0].verdict, OomVerdict::Unclear);
  EXPECT_EQ(result[1].largest_reusable_block, 90 * MiB);
}

// Several OOMs on two devices: one replay per device, results in trace order.
TEST(Fragmentation, SeveralOomsAcrossDevices) {
  SnapshotBuilder b;
  b.segment(kBase, {{20 * MiB, kFree}});
  b.segment(kBase, {{20 * MiB, kLive}}, 0, true, 1);
  b.oom(30 * MiB, 0);                                  // dev 0 #0: nothing allocated yet
  b.event(Action::SegmentAlloc, kBase, 20 * MiB);      // 1
  b.event(Action::Alloc, kBase, 20 * MiB);             // 2
  b.oom(8 * MiB, 0);                                   // 3: everything live
  b.event(Action::FreeCompleted, kBase, 20 * MiB);     // 4
  b.event(Action::Alloc, kBase, 20 * MiB, 0, 1);       // dev 1 #0
  b.event(Action::Oom, 0, 4 * MiB, 0, 1);              // dev 1 #1
  const auto result = b.analyze();
  ASSERT_EQ(result.size(), 3u);
  EXPECT_EQ(result[0].event.device, 0);
  EXPECT_EQ(result[0].at_oom.reserved, 0u);
  EXPECT_EQ(result[0].verdict, OomVerdict::Capacity);
  EXPECT_EQ(result[1].at_oom.reserved, 20 * MiB);
  EXPECT_EQ(result[1].at_oom.allocated, 20 * MiB);
  EXPECT_EQ(result[1].largest_reusable_block, 0u);
  EXPECT_EQ(result[1].verdict, OomVerdict::Capacity);
  EXPECT_EQ(result[2].event.device, 1);
  EXPECT_EQ(result[2].at_oom.allocated, 20 * MiB);
  EXPECT_EQ(result[2].verdict, OomVerdict::Capacity);
}

// Pending-free blocks occupy their range; a gap is split by them.
TEST(Fragmentation, PendingFreeBlocksAreNotReusable) {
  SnapshotBuilder b;
  b.segment(kBase, {{8 * MiB, kFree}, {4 * MiB, kPending}, {8 * MiB, kFree}});
  b.oom(10 * MiB, 0);
  const auto result = b.analyze();
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].at_oom.inactive, 16 * MiB);
  EXPECT_EQ(result[0].at_oom.allocated, 4 * MiB);
  EXPECT_EQ(result[0].largest_reusable_block, 8 * MiB);
  EXPECT_EQ(result[0].at_oom.segments_with_inactive, 1u);
  EXPECT_EQ(result[0].verdict, OomVerdict::Fragmentation);
  EXPECT_EQ(result[0].reason,
            "The failed request of 10.00 MiB is larger than the largest reusable inactive block (8.00 MiB) "
            "although 16.00 MiB was free in 1 segment of the same pool and stream that also held live blocks");
}

// Frees of unknown addresses, ranges outside or overlapping segments, wrapping addresses and a
// segment pointing past the block array: nothing crashes and the totals stay consistent.
TEST(Fragmentation, InconsistentTraceDoesNotCrash) {
  constexpr std::uint64_t kTop = std::numeric_limits<std::uint64_t>::max();
  SnapshotBuilder b;
  b.segment(kBase, {{2 * MiB, kFree}});
  b.s.segments.push_back(b.s.segments[0]);
  b.s.segments.back().address = kBase + 64 * MiB;
  b.s.segments.back().first_block = 1000;  // past the block array
  b.event(Action::Alloc, 0xdead, 4096);                           // 0: never freed, unknown
  b.event(Action::FreeCompleted, kBase + MiB, 3 * MiB);           // 1: runs past its segment
  b.event(Action::SegmentAlloc, 0x1000, 4 * MiB);                 // 2: unknown segment
  b.event(Action::SegmentFree, kBase + MiB, 2 * MiB);             // 3: overlaps a live segment
  b.event(Action::FreeCompleted, kTop - 10, 1000);                // 4: wraps
  b.event(Action::SegmentUnmap, kTop - 100, 1000);                // 5: wraps
  b.event(Action::SegmentMap, 0, kTop);                           // 6: everything
  b.event(Action::FreeCompleted, 0xbeef, 512);                    // 7: unknown, outside segments
  b.oom(4 * MiB, 0);                                              // 8
  b.event(Action::Alloc, 0x5000, 512);                            // 9: unknown
  for (std::size_t i = 0; i <= 10; ++i) {
    const Layout l = layout_before_event(b.s, 0, i);
    EXPECT_TRUE(l.replayed);
    EXPECT_LE(l.inactive, l.reserved) << i;
    EXPECT_LE(l.largest_inactive_block, l.inactive) << i;
  }
  const Layout at_oom = layout_before_event(b.s, 0, 8);  // the final state: two free 2 MiB segments
  EXPECT_EQ(at_oom.reserved, 4 * MiB);
  EXPECT_EQ(at_oom.allocated, 0u);
  EXPECT_EQ(at_oom.inactive, 4 * MiB);
  const Layout unmapped = layout_before_event(b.s, 0, 6);  // the map of everything undone
  EXPECT_EQ(unmapped.reserved, 0u);
  EXPECT_EQ(unmapped.allocated, 512u);
  const Layout wrapped = layout_before_event(b.s, 0, 4);  // [top - 100, top) with a block at top - 10
  EXPECT_EQ(wrapped.reserved, 100u);
  EXPECT_EQ(wrapped.inactive, 90u);
  const Layout start = layout_before_event(b.s, 0, 0);
  EXPECT_EQ(start.reserved, 2 * MiB + 100);
  EXPECT_EQ(start.allocated, 3 * MiB + 1000 + 512);
  EXPECT_EQ(start.inactive, 90u);
  const auto result = b.analyze();
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].largest_reusable_block, 2 * MiB);
  // Both segments are wholly free: the allocator releases them before it raises an OOM, so the
  // 4 MiB request is no fragmentation, and with nothing live not capacity either.
  EXPECT_EQ(result[0].verdict, OomVerdict::Unclear);
  EXPECT_EQ(layout_before_event(b.s, -1, 0).reserved, 0u);
}

// A long trace (alloc/free pairs over one segment) replays in one pass per OOM.
TEST(Fragmentation, LongTraceReplay) {
  SnapshotBuilder b;
  b.segment(kBase, {{2 * MiB, kLive}, {18 * MiB, kFree}});
  b.event(Action::Alloc, kBase, 2 * MiB);
  for (int i = 0; i < 200000; ++i) {
    const std::uint64_t addr = kBase + 2 * MiB + static_cast<std::uint64_t>(i % 16) * MiB;
    b.event(Action::Alloc, addr, MiB);
    if (i == 100000) b.oom(32 * MiB, 0);
    b.event(Action::FreeCompleted, addr, MiB);
  }
  const auto result = b.analyze();
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].at_oom.allocated, 3 * MiB);
  EXPECT_EQ(result[0].at_oom.inactive, 17 * MiB);
}

}  // namespace fragmentation_tests
}  // namespace memsnap

namespace memsnap {
namespace fragmentation_tests {

// Inactive memory split by what the allocator can do with it: wholly free segments (released by
// empty_cache() and before an OOM) against fragments inside segments that hold live blocks.
TEST(Fragmentation, TotalsSplitWhollyFreeSegmentsFromFragments) {
  SnapshotBuilder b;
  b.segment(kBase, {{4 * MiB, kLive}, {6 * MiB, kFree}, {2 * MiB, kLive}});
  b.segment(kBase + 20 * MiB, {{30 * MiB, kFree}});
  b.segment(kBase + 60 * MiB, {{10 * MiB, kFree}, {10 * MiB, kFree}});
  b.segment(kBase + 90 * MiB, {{MiB, kFree}, {MiB, kPending}});  // pending: not wholly free
  const Totals t = compute_totals(b.s, {}).overall;
  EXPECT_EQ(t.inactive, 57 * MiB);
  EXPECT_EQ(t.inactive_in_free_segments, 50 * MiB);
  EXPECT_EQ(t.free_segments, 2u);
  EXPECT_EQ(t.fragments(), 7 * MiB);
  EXPECT_EQ(t.largest_fragment, 6 * MiB);
}

// The only inactive memory is a wholly free segment: the allocator releases it and retries before
// raising the OOM, so the request failed for lack of capacity.
TEST(Fragmentation, WhollyFreeSegmentIsNotFragmentation) {
  SnapshotBuilder b;
  b.segment(kBase, {{58 * MiB, kLive}});
  b.segment(kBase + 64 * MiB, {{20 * MiB, kFree}});
  b.event(Action::Alloc, kBase, 58 * MiB);
  b.oom(30 * MiB, MiB);
  const auto result = b.analyze();
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].at_oom.in_free_segments, 20 * MiB);
  EXPECT_EQ(result[0].fragments_in_pool, 0u);
  EXPECT_EQ(result[0].verdict, OomVerdict::Capacity);
  EXPECT_EQ(result[0].reason,
            "Live allocations of 58.00 MiB at the OOM leave no room for the failed request of 30.00 MiB: 78.00 MiB was "
            "reserved and 1.00 MiB was free on the device, so allocator tuning will not help (not fragmentation: only "
            "20.00 MiB was inactive then, 20.00 MiB of it in wholly free segments, which the allocator releases and "
            "retries before raising an OOM)");
}

// Live memory at 97.5% of the device: scattered fragments that could hold the request are too
// little to matter, so the verdict is capacity, not fragmentation.
TEST(Fragmentation, NearlyFullDeviceIsCapacityDespiteFragments) {
  SnapshotBuilder b;
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t addr = kBase + i * 20 * MiB;
    b.segment(addr, {{19 * MiB + 512 * KiB, kLive}, {512 * KiB, kFree}});
    b.event(Action::Alloc, addr, 19 * MiB + 512 * KiB);
  }
  b.oom(4 * MiB, 0);
  const auto result = b.analyze();
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].fragments_in_pool, 10 * MiB);
  EXPECT_EQ(result[0].largest_reusable_block, 512 * KiB);
  EXPECT_EQ(result[0].verdict, OomVerdict::Capacity);
}

// Without an OOM: gigabytes of wholly free segments are cache, said to be "not fragmentation".
TEST(Fragmentation, LargeCacheWithoutOomIsCachedMemory) {
  SnapshotBuilder b;
  b.segment(kBase, {{GiB, kLive}});
  for (int i = 0; i < 3; ++i) b.segment(kBase + (i + 1) * 2 * GiB, {{GiB, kFree}});
  const auto ids = pattern_ids(b.s);
  EXPECT_NE(std::find(ids.begin(), ids.end(), "cached_memory"), ids.end());
  EXPECT_EQ(std::find(ids.begin(), ids.end(), "fragmentation"), ids.end());
}

// Without an OOM: 3.2 GiB free in 80 MiB fragments of 40 partly used segments is fragmentation.
TEST(Fragmentation, ThinFragmentsWithoutOomAreFragmentation) {
  SnapshotBuilder b;
  for (int i = 0; i < 40; ++i) b.segment(kBase + i * 128 * MiB, {{20 * MiB, kLive}, {80 * MiB, kFree}});
  const auto ids = pattern_ids(b.s);
  EXPECT_NE(std::find(ids.begin(), ids.end(), "fragmentation"), ids.end());
  EXPECT_EQ(std::find(ids.begin(), ids.end(), "cached_memory"), ids.end());
}

}  // namespace fragmentation_tests
}  // namespace memsnap
