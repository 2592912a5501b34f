// Building blocks of the analysis checked against naive versions: BigVector's growth and
// resizes, the checkpointed LiveCurve and the timeline's peaks, the lifetimes live at given
// moments, and layouts_before() asked for several moments at once in any order.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <random>
#include <vector>

#include "analysis/fragmentation.h"
#include "analysis/layout_replay.h"
#include "analysis/live_curve.h"
#include "analysis/timeline.h"
#include "base/big_vector.h"

namespace memsnap {
namespace analysis_parts_tests {

TEST(BigVector, GrowsPastSeveralMappingsAndKeepsItsElements) {
  BigVector<std::uint64_t> v;
  const std::size_t n = 3'000'000;  // 24 MB: several mremap growths
  for (std::size_t i = 0; i < n; ++i) v.push_back(i * 7);
  ASSERT_EQ(v.size(), n);
  EXPECT_GE(v.capacity(), n);
  for (std::size_t i = 0; i < n; i += 9973) ASSERT_EQ(v[i], i * 7);
  EXPECT_EQ(v.back(), (n - 1) * 7);

  BigVector<std::uint64_t> copy(v);
  BigVector<std::uint64_t> moved(std::move(v));
  EXPECT_TRUE(v.empty());  // NOLINT(bugprone-use-after-move): a moved-from BigVector is empty
  ASSERT_EQ(copy.size(), n);
  ASSERT_EQ(moved.size(), n);
  EXPECT_TRUE(std::equal(copy.begin(), copy.end(), moved.begin()));
}

// What a growing vector asks the prefault thread for: the whole pages from what it has written
// (or asked for before) up to 2 MiB beyond, never past its mapping, and nothing twice.
TEST(BigVector, PrefaultAsksForTheNextTwoMiBOfItsMappingOnce) {
  using big_vector_detail::prefault_ahead;
  constexpr std::size_t kMiB = std::size_t(1) << 20;
  void* data = big_vector_detail::map_bytes(16 * kMiB);  // the requests are real: a mapping of our own
  EXPECT_EQ(prefault_ahead(data, 16 * kMiB, 4 * kMiB, 0), 6 * kMiB);
  EXPECT_EQ(prefault_ahead(data, 16 * kMiB, 5 * kMiB + 100, 6 * kMiB), 7 * kMiB);  // whole pages only
  EXPECT_EQ(prefault_ahead(data, 16 * kMiB, 5 * kMiB, 7 * kMiB), 7 * kMiB);        // already asked for
  EXPECT_EQ(prefault_ahead(data, 8 * kMiB, 7 * kMiB, 7 * kMiB), 8 * kMiB);         // the mapping's end
  EXPECT_EQ(prefault_ahead(data, 8 * kMiB, 8 * kMiB, 8 * kMiB), 8 * kMiB);
  big_vector_detail::unmap_bytes(data, 16 * kMiB);
}

// Appends keep every element while the prefault thread faults in pages ahead of them and each
// growth moves the mapping (the thread may then populate an address range that is gone).
TEST(BigVector, AppendsKeepTheirElementsWhilePagesAreFaultedInAhead) {
  BigVector<std::uint32_t> v;
  std::uint32_t chunk[44];
  const std::uint32_t rounds = 200'000;  // 35 MB
  for (std::uint32_t r = 0; r < rounds; ++r) {
    for (std::uint32_t k = 0; k < 44; ++k) chunk[k] = r * 44 + k;
    v.append(chunk, 44);
  }
  ASSERT_EQ(v.size(), std::size_t(rounds) * 44);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != i) FAIL() << "element " << i << " is " << v[i];
  }
}

// The VmFlags of the mapping in /proc/self/smaps that holds `address` ("" when none does).
std::string mapping_flags(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2) {  // a mapping's first line
      inside = start <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// A vector of 4 MiB or more lives in a 2 MiB-aligned mapping that asks for transparent huge pages
// (smaps' VmFlags "hg"), also after growing moved it; a smaller one keeps 4 KiB pages.
TEST(BigVector, LargeMappingsAreAlignedAndAskForHugePages) {
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) GTEST_SKIP() << "no transparent huge pages in this kernel";
  constexpr std::size_t kMiB = std::size_t(1) << 20;
  BigVector<std::uint64_t> small;
  small.push_back(1);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.data()) % (2 * kMiB), 0u);
  EXPECT_EQ(mapping_flags(small.data()).find(" hg"), std::string::npos) << mapping_flags(small.data());

  BigVector<std::uint64_t> large;
  for (std::size_t i = 0; i < kMiB; ++i) large.push_back(i);  // 8 MiB: grown (moved) three times
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(large.data()) % (2 * kMiB), 0u);
  EXPECT_NE(mapping_flags(large.data()).find(" hg"), std::string::npos) << mapping_flags(large.data());
  for (std::size_t i = 0; i < kMiB; i += 4099) ASSERT_EQ(large[i], i);
}

TEST(BigVector, ResizeFillsAndResizeForOverwriteKeepsTheOldElements) {
  BigVector<int> v{1, 2, 3};
  v.resize(6, 9);
  EXPECT_EQ(std::vector<int>(v.begin(), v.end()), (std::vector<int>{1, 2, 3, 9, 9, 9}));
  v.resize(2);
  v.resize_for_overwrite(1'000'000);
  ASSERT_EQ(v.size(), 1'000'000u);
  EXPECT_EQ(v[0], 1);
  EXPECT_EQ(v[1], 2);
  v.clear();
  EXPECT_TRUE(v.empty());
  v.push_back(5);
  EXPECT_EQ(v.front(), 5);
}

// Growing with zeros rewrites what an earlier, larger size left behind, and leaves the pages
// never written alone: a 64 MiB table of zeros costs no memory until it is written.
TEST(BigVector, ResizeWithZerosClearsOldElementsAndFaultsNoFreshPage) {
  BigVector<std::uint32_t> v;
  for (std::uint32_t i = 1; i <= 10; ++i) v.push_back(i);
  v.resize(3);
  v.resize(16 << 20, 0);  // 64 MiB
  EXPECT_EQ(std::vector<std::uint32_t>(v.begin(), v.begin() + 12), (std::vector<std::uint32_t>{1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  const long page = sysconf(_SC_PAGESIZE);
  auto* tail = reinterpret_cast<std::uint8_t*>(v.data() + v.size()) - 32 * page;  // the last 32 pages
  unsigned char resident[32] = {};
  ASSERT_EQ(mincore(tail, 32 * static_cast<std::size_t>(page), resident), 0);
  int faulted = 0;
  for (unsigned char r : resident) faulted += r & 1;
  EXPECT_EQ(faulted, 0);
  EXPECT_EQ(v[v.size() - 1], 0u);  // and they read as zeros
}

// The high-water mark survives pushes, shrinks and clears in any order: zeros are rewritten up to
// the largest size the vector ever had, not only the one before the last shrink.
TEST(BigVector, ResizeWithZerosClearsWhatEveryEarlierSizeLeft) {
  BigVector<std::uint32_t> v;
  for (std::uint32_t i = 1; i <= 10; ++i) v.push_back(i);
  v.resize(3);
  for (std::uint32_t i = 4; i <= 20; ++i) v.push_back(i);  // 20 elements, past the mark of 10
  v.clear();
  v.push_back(7);
  v.resize(25, 0);
  std::vector<std::uint32_t> want(25, 0);
  want[0] = 7;
  EXPECT_EQ(std::vector<std::uint32_t>(v.begin(), v.end()), want);
  v.resize(1);
  v.append(want.data(), 2);  // 7, 0 after the 7: v is 7, 7, 0
  v.resize(25, 0);
  want[1] = 7;
  EXPECT_EQ(std::vector<std::uint32_t>(v.begin(), v.end()), want);
}

#ifdef MEMSNAP_BIG_VECTOR_ASAN
// The annotations follow every size change: reading past size() is an AddressSanitizer error.
void read_past_the_size() {
  BigVector<std::uint64_t> v;
  for (std::uint64_t i = 0; i < 3; ++i) v.push_back(i);
  volatile std::uint64_t x = v.data()[3];
  (void)x;
}

void read_past_a_shrunk_size() {
  BigVector<std::uint64_t> v;
  for (std::uint64_t i = 0; i < 3; ++i) v.push_back(i);
  v.pop_back();
  v.pop_back();
  volatile std::uint64_t x = v.data()[1];
  (void)x;
}

TEST(BigVector, CapacityPastTheSizeIsPoisonedUnderAddressSanitizer) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(read_past_the_size(), "AddressSanitizer");
  EXPECT_DEATH(read_past_a_shrunk_size(), "AddressSanitizer");
  BigVector<std::uint64_t> v;
  v.resize(1000);
  volatile std::uint64_t x = v.data()[999];  // grown: readable
  (void)x;
}
#endif

// A random trace: allocs of fresh addresses, frees of live ones, segment events, others; with
// `free_all`, ending with the frees of the blocks still live (a final state with none).
std::vector<TraceEvent> random_trace(std::size_t n, std::uint32_t seed, bool free_all = false) {
  std::mt19937_64 rng(seed);
  std::vector<TraceEvent> out;
  std::vector<std::uint64_t> live;
  std::uint64_t next = 0x1000;
  for (std::size_t i = 0; i < n; ++i) {
    TraceEvent e;
    const unsigned pick = rng() % 10;
    if (pick < 5 || live.empty()) {
      e.action = Action::Alloc;
      e.addr = next;
      e.size = 512 * (1 + (e.addr >> 20) % 64);  // the free below repeats it
      next += 1 << 20;
      live.push_back(e.addr);
    } else if (pick < 8) {
      const std::size_t k = rng() % live.size();
      e.action = Action::FreeCompleted;
      e.addr = live[k];
      e.size = 512 * (1 + (e.addr >> 20) % 64);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (pick == 8) {
      e.action = rng() % 2 ? Action::SegmentAlloc : Action::SegmentFree;
      e.size = 2 << 20;
    } else {
      e.action = Action::FreeRequested;
    }
    e.time_us = static_cast<std::int64_t>(i);
    e.has_time = true;
    out.push_back(e);
  }
  if (!free_all) live.clear();
  for (std::uint64_t addr : live) {
    TraceEvent e;
    e.action = Action::FreeCompleted;
    e.addr = addr;
    e.size = 512 * (1 + (addr >> 20) % 64);
    out.push_back(e);
  }
  return out;
}

// The live bytes at every point of `events`, walked backwards from `end_live`: what LiveCurve answers.
std::vector<std::int64_t> full_curve(const std::vector<TraceEvent>& events, std::int64_t end_live) {
  std::vector<std::int64_t> full(events.size() + 1);
  full[events.size()] = end_live;
  for (std::size_t k = events.size(); k-- > 0;) full[k] = full[k + 1] - static_cast<std::int64_t>(live_delta(events[k]));
  return full;
}

TEST(LiveCurve, MatchesTheFullCurveAtEveryPoint) {
  for (std::size_t n : {0u, 1u, 63u, 64u, 65u, 1000u, 4099u}) {
    const auto events = random_trace(n, static_cast<std::uint32_t>(n));
    const std::int64_t end_live = 123456;
    const std::vector<std::int64_t> full = full_curve(events, end_live);
    std::vector<std::int64_t> visited(n + 1, -1);
    const LiveCurve curve(events, end_live, [&](std::size_t k, std::int64_t value) { visited[k] = value; });
    ASSERT_EQ(curve.size(), n + 1);
    EXPECT_EQ(visited, full) << n;
    for (std::size_t k = 0; k <= n; ++k) ASSERT_EQ(curve[k], full[k]) << "n=" << n << " k=" << k;
    LiveCurve::Reader in_order(curve), with_jumps(curve);
    for (std::size_t k = 0; k <= n; ++k) ASSERT_EQ(in_order.at(k), full[k]) << "n=" << n << " k=" << k;
    for (std::size_t k = 0; k <= n; k += 1 + k % 150) ASSERT_EQ(with_jumps.at(k), full[k]) << "n=" << n << " k=" << k;
    if (n > 0) EXPECT_EQ(with_jumps.at(n / 3), full[n / 3]);  // back again
  }
  EXPECT_TRUE(LiveCurve().empty());
  EXPECT_EQ(LiveCurve().size(), 0u);
}

// The highest point of every range equals a scan of the full curve: ranges inside one block,
// across a block's edge, over whole blocks and to the end.
TEST(LiveCurve, TheHighestPointOfARangeIsTheScansAnswer) {
  for (std::size_t n : {1u, 63u, 64u, 65u, 200u, 4099u}) {
    const auto events = random_trace(n, static_cast<std::uint32_t>(n) + 7);
    const std::vector<std::int64_t> full = full_curve(events, 1 << 20);
    const LiveCurve curve(events, full[n], [](std::size_t, std::int64_t) {});
    auto scan = [&](std::size_t from, std::size_t to) { return *std::max_element(full.begin() + from, full.begin() + to + 1); };
    const std::size_t step = n > 300 ? 37 : 1;
    for (std::size_t from = 0; from <= n; from += step) {
      for (std::size_t to = from; to <= n; to += step) ASSERT_EQ(curve.max_between(from, to), scan(from, to)) << n << " " << from << " " << to;
      ASSERT_EQ(curve.max_between(from, n), scan(from, n)) << n << " " << from;
    }
  }
}

// The first lowest and first highest point of every range are the walk's (ties included: the
// events that change nothing repeat a value), inside a block, across edges and over many blocks.
TEST(LiveCurve, ARangesExtremesAreTheFirstPointsAWalkFinds) {
  for (std::size_t n : {1u, 63u, 64u, 65u, 200u, 4099u}) {
    const auto events = random_trace(n, static_cast<std::uint32_t>(n) + 11);
    const std::vector<std::int64_t> full = full_curve(events, 1 << 20);
    const LiveCurve curve(events, full[n], [](std::size_t, std::int64_t) {});
    const std::size_t step = n > 300 ? 29 : 1;
    for (std::size_t from = 0; from <= n; from += step) {
      std::vector<std::size_t> ends;
      for (std::size_t to = from + 1; to <= n; to += step) ends.push_back(to);
      ends.push_back(n + 1);
      for (std::size_t to : ends) {
        const auto lo = std::min_element(full.begin() + from, full.begin() + to);
        const auto hi = std::max_element(full.begin() + from, full.begin() + to);  // the first of equal maxima
        const LiveCurve::Extremes e = curve.extremes(from, to);
        ASSERT_EQ(e.lo, static_cast<std::size_t>(lo - full.begin())) << n << " " << from << " " << to;
        ASSERT_EQ(e.hi, static_cast<std::size_t>(hi - full.begin())) << n << " " << from << " " << to;
        ASSERT_EQ(e.low, *lo);
        ASSERT_EQ(e.high, *hi);
      }
    }
  }
}

TEST(LiveCurve, WrapsInsteadOfOverflowingOnHostileSizes) {
  std::vector<TraceEvent> events(2);
  events[0].action = Action::Alloc;
  events[0].size = ~std::uint64_t{0};  // 2^64 - 1
  events[1].action = Action::FreeCompleted;
  events[1].size = std::uint64_t{1} << 63;
  const LiveCurve curve(events, 0, [](std::size_t, std::int64_t) {});
  LiveCurve::Reader reader(curve);
  EXPECT_EQ((std::vector<std::int64_t>{reader.at(0), reader.at(1), reader.at(2)}), (std::vector<std::int64_t>{curve[0], curve[1], curve[2]}));
  EXPECT_EQ(curve[2], 0);
}

// The reserved bytes after k events, read in order, equal reserved_at(k): unchanged up to and
// including a segment event's index, its new value after it.
TEST(ReservedCurveReader, ReadsTheStepsOfTheSegmentEventsInOrder) {
  DeviceTimeline t;
  t.events = 10;
  t.reserved_start = 100;
  t.segment_events = {0, 3, 4, 9};
  t.reserved_after = {200, 300, 250, 0};
  ReservedCurveReader reader(t);
  std::vector<std::int64_t> got;
  for (std::size_t k = 0; k <= 10; ++k) got.push_back(reader.at(k));
  EXPECT_EQ(got, (std::vector<std::int64_t>{100, 200, 200, 200, 300, 250, 250, 250, 250, 250, 0}));
  for (std::size_t k = 0; k <= 10; ++k) EXPECT_EQ(got[k], reserved_at(t, k)) << k;
  EXPECT_EQ(reader.at(2), 200);  // back again
}

// A snapshot with one device's random trace and no segments.
Snapshot snapshot_with(const std::vector<TraceEvent>& events) {
  Snapshot s;
  s.strings = {""};
  s.device_traces.resize(1);
  for (const TraceEvent& e : events) s.device_traces[0].events.push_back(e);
  s.device_traces[0].total = events.size();
  return s;
}

TEST(Timeline, PeaksMatchNaiveBackwardWalks) {
  const auto events = random_trace(5000, 7);
  const Snapshot s = snapshot_with(events);
  const auto timelines = build_timelines(s);
  ASSERT_EQ(timelines.size(), 1u);
  const DeviceTimeline& t = timelines[0];
  std::int64_t live = 0, peak = 0, reserved = 0, peak_reserved = 0;
  std::size_t peak_index = events.size();
  for (std::size_t k = events.size(); k-- > 0;) {
    const TraceEvent& e = events[k];
    live -= static_cast<std::int64_t>(live_delta(e));
    if (live > peak) {
      peak = live;
      peak_index = k;
    }
    if (e.action == Action::SegmentAlloc) reserved -= static_cast<std::int64_t>(e.size);
    if (e.action == Action::SegmentFree) reserved += static_cast<std::int64_t>(e.size);
    peak_reserved = std::max(peak_reserved, reserved);
  }
  EXPECT_EQ(t.peak_allocated, peak);
  EXPECT_EQ(t.peak_index, peak_index);
  EXPECT_EQ(t.peak_reserved, peak_reserved);
  EXPECT_EQ(t.curve[peak_index], peak);
}

TEST(Timeline, LayoutsForSeveralMomentsMatchOneAtATime) {
  const auto events = random_trace(3000, 11, true);
  const Snapshot s = snapshot_with(events);
  const auto timelines = build_timelines(s);
  const std::vector<std::size_t> moments{2500, 10, 3000, 10, 1700, 99999};  // unordered, repeated, past the end
  const auto together = layouts_before(s, timelines[0], moments);
  ASSERT_EQ(together.size(), moments.size());
  for (std::size_t i = 0; i < moments.size(); ++i) {
    const DeviceLayout alone = std::move(layouts_before(s, timelines[0], {moments[i]}).front());
    EXPECT_EQ(together[i].live.size(), alone.live.size()) << moments[i];
    EXPECT_EQ(together[i].allocated(), alone.allocated()) << moments[i];
    EXPECT_EQ(together[i].reserved(), alone.reserved()) << moments[i];
    // The live bytes of the layout are the curve's value there.
    EXPECT_EQ(static_cast<std::int64_t>(together[i].allocated()), timelines[0].curve[std::min(moments[i], events.size())]);
  }
  EXPECT_TRUE(std::is_sorted(together[0].live.begin(), together[0].live.end(),
                             [](const auto& a, const auto& b) { return a.first < b.first; }));
}

// The lifetimes live at each moment, in lifetime order, whether one core walks them or two walk
// a half each (200,000 lifetimes: past the split; 1,000: below it).
TEST(Timeline, LiveLifetimesAtMomentsAreANaiveCheckOfEach) {
  std::mt19937_64 rng(16);
  for (const std::size_t count : {std::size_t{1000}, std::size_t{200'000}}) {
    DeviceTimeline t;
    const std::size_t events = 4 * count;
    for (std::size_t k = 0; k < count; ++k) {
      Lifetime l;
      l.alloc = rng() % 8 == 0 ? kBeforeWindow : static_cast<EventIndex>(rng() % events);
      const std::size_t after = l.alloc == kBeforeWindow ? 0 : std::size_t{l.alloc} + 1;
      l.free = rng() % 5 == 0 ? kStillLive : static_cast<EventIndex>(after + rng() % (events - after + 1));
      l.size = 512;
      t.lifetimes.push_back(l);
    }
    const std::vector<std::size_t> moments = {0, 1, events / 3, events / 2, events / 2 + 1, events - 1, events};
    const std::vector<std::vector<std::size_t>> live = live_lifetimes(t, moments);
    ASSERT_EQ(live.size(), moments.size());
    for (std::size_t m = 0; m < moments.size(); ++m) {
      std::vector<std::size_t> expected;
      for (std::size_t k = 0; k < count; ++k) {
        if (t.lifetimes[k].live_at(moments[m])) expected.push_back(k);
      }
      EXPECT_EQ(live[m], expected) << count << " lifetimes, moment " << moments[m];
      EXPECT_GT(expected.size(), 0u);
    }
  }
}

}  // namespace analysis_parts_tests
}  // namespace memsnap
