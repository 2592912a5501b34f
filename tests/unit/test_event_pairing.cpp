// The alloc/free pairing the reader makes while it stores a device's events (EventStore,
// model/event_pairing.h): handed to the analysis only when it is exactly the pairing of the kept
// events, and the timelines are the same whether the analysis takes it or pairs the events itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "analysis/live_curve.h"
#include "analysis/plausibility.h"
#include "analysis/timeline.h"
#include "model/event_pairing.h"
#include "model/load.h"
#include "test_support.h"

namespace memsnap {
namespace event_pairing_tests {

std::string fixture_path(const std::string& name) { return std::string(MEMSNAP_FIXTURE_DIR) + "/" + name + ".pickle"; }

LoadedSnapshot load_json(const std::string& json, std::uint64_t max_events = 1'000'000) {
  return test::load_bytes(std::vector<std::uint8_t>(json.begin(), json.end()), max_events);
}

using LifetimeFields = std::tuple<EventIndex, EventIndex, std::uint64_t, StackId, StackId>;
std::vector<LifetimeFields> fields_of(const Lifetimes& lifetimes) {
  std::vector<LifetimeFields> out;
  for (const Lifetime& l : lifetimes) out.emplace_back(l.alloc, l.free, l.size, l.stack, l.free_stack);
  return out;
}

std::vector<std::tuple<std::uint64_t, std::size_t, std::size_t>> sorted_open(const EventPairs& p) {
  std::vector<std::tuple<std::uint64_t, std::size_t, std::size_t>> out;
  for (const auto& [addr, o] : p.open) out.emplace_back(addr, o.lifetime, o.requested);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::pair<std::uint64_t, std::size_t>> sorted_orphans(const EventPairs& p) {
  std::vector<std::pair<std::uint64_t, std::size_t>> out(p.orphan_requests.begin(), p.orphan_requests.end());
  std::sort(out.begin(), out.end());
  return out;
}

void expect_same_pairs(const EventPairs& a, const EventPairs& b, const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.actions, b.actions);
  EXPECT_EQ(a.times_ascending, b.times_ascending);
  EXPECT_EQ(a.matched_frees, b.matched_frees);
  EXPECT_EQ(a.frees_before_window, b.frees_before_window);
  EXPECT_EQ(a.bytes_freed_before_window, b.bytes_freed_before_window);
  EXPECT_EQ(fields_of(a.lifetimes), fields_of(b.lifetimes));
  EXPECT_EQ(a.free_bursts.lifetimes, b.free_bursts.lifetimes);
  EXPECT_EQ(a.free_bursts.ends, b.free_bursts.ends);
  EXPECT_EQ(a.segment_events, b.segment_events);
  EXPECT_EQ(a.oom_events, b.oom_events);
  EXPECT_EQ(sorted_open(a), sorted_open(b));
  EXPECT_EQ(sorted_orphans(a), sorted_orphans(b));
}

// An alloc freed in the window, a free of a block allocated before it, a pending free_requested
// and an alloc still live at the end; the timestamps go backwards once.
const std::string kTrace = R"({"segments": [], "device_traces": [[
  {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 10, "frames": []},
  {"action": "free_requested", "addr": 4096, "size": 512, "stream": 0, "time_us": 11, "frames": []},
  {"action": "free_completed", "addr": 4096, "size": 512, "stream": 0, "time_us": 12, "frames": []},
  {"action": "free_completed", "addr": 8192, "size": 1024, "stream": 0, "time_us": 13, "frames": []},
  {"action": "segment_alloc", "addr": 65536, "size": 2097152, "stream": 0, "time_us": 14, "frames": []},
  {"action": "alloc", "addr": 65536, "size": 2048, "stream": 0, "time_us": 9, "frames": []},
  {"action": "free_requested", "addr": 65536, "size": 2048, "stream": 0, "time_us": 15, "frames": []}]]})";

// Every generated fixture: a pairing handed over is the one a pass over the kept events makes, and
// most devices hand one over.
TEST(EventPairing, TheReadersPairingIsThePairingOfTheKeptEvents) {
  std::size_t devices = 0, handed = 0;
  for (const std::string& name : test::fixture_names()) {
    const LoadedSnapshot loaded = load_snapshot(fixture_path(name));
    const Snapshot& s = loaded.snapshot;
    for (std::size_t d = 0; d < s.device_traces.size(); ++d) {
      if (s.device_traces[d].events.size() == 0) continue;
      ++devices;
      const std::unique_ptr<EventPairs> ready = s.device_traces[d].pairs.take();
      if (!ready) continue;
      ++handed;
      expect_same_pairs(*ready, pair_all(s.device_traces[d].events), name + " device " + std::to_string(d));
      EXPECT_EQ(s.device_traces[d].pairs.take(), nullptr) << "handed over once only";
    }
  }
  EXPECT_GT(devices, 20u);
  EXPECT_GT(handed * 10, devices * 8);
}

TEST(EventPairing, PairsEveryKindOfEventAsTheTimelineNeedsThem) {
  const LoadedSnapshot loaded = load_json(kTrace);
  const std::unique_ptr<EventPairs> p = loaded.snapshot.device_traces[0].pairs.take();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->events, 7u);
  EXPECT_EQ(p->matched_frees, 1u);
  EXPECT_EQ(p->frees_before_window, 1u);
  EXPECT_EQ(p->bytes_freed_before_window, 1024u);
  EXPECT_FALSE(p->times_ascending);
  EXPECT_EQ(fields_of(p->lifetimes), (std::vector<LifetimeFields>{{0, 2, 512, kNoStack, kNoStack},
                                                                  {kBeforeWindow, 3, 1024, kNoStack, kNoStack},
                                                                  {5, kStillLive, 2048, kNoStack, kNoStack}}));
  EXPECT_EQ(p->segment_events, (std::vector<std::size_t>{4}));
  EXPECT_EQ(sorted_open(*p), (std::vector<std::tuple<std::uint64_t, std::size_t, std::size_t>>{{65536, 2, 7}}));
  // Live sums: +512 -512 -1024 (the older block) +2048; the highest, 1024, holds after events 6 and 7.
  EXPECT_TRUE(p->live.exact);
  EXPECT_EQ(p->live.total, 1024);
  EXPECT_EQ(p->live.max, 1024);
  EXPECT_EQ(p->live.max_index, 7u);
  EXPECT_EQ(p->live.min, -1024);
  EXPECT_EQ(p->live.checkpoints, (std::vector<std::int64_t>{0}));
}

// The curve at every point, its peak and the peak's time.
void expect_same_curve(const DeviceTimeline& a, const DeviceTimeline& b) {
  EXPECT_EQ(a.peak_index, b.peak_index);
  EXPECT_EQ(a.peak_allocated, b.peak_allocated);
  EXPECT_EQ(a.peak_time_us, b.peak_time_us);
  ASSERT_EQ(a.curve.size(), b.curve.size());
  LiveCurve::Reader ra(a.curve), rb(b.curve);
  for (std::size_t k = 0; k < a.curve.size(); ++k) ASSERT_EQ(ra.at(k), rb.at(k)) << k;
  // The block maxima: ranges from every 13th point over 1, 70 and 300 points, and to the end.
  const std::size_t last = a.curve.size() - 1;
  for (std::size_t from = 0; a.curve.size() > 0 && from <= last; from += 13) {
    for (std::size_t length : {std::size_t{1}, std::size_t{70}, std::size_t{300}, last - from}) {
      const std::size_t to = std::min(last, from + length);
      ASSERT_EQ(a.curve.max_between(from, to), b.curve.max_between(from, to)) << from << " " << to;
      const LiveCurve::Extremes ea = a.curve.extremes(from, to + 1), eb = b.curve.extremes(from, to + 1);
      ASSERT_EQ(std::tie(ea.lo, ea.hi, ea.low, ea.high), std::tie(eb.lo, eb.hi, eb.low, eb.high)) << from << " " << to;
    }
  }
}

// Sizes whose sums leave 64 bits (3 x 2^62 allocated) or a size above INT64_MAX: the sums say
// they are not exact, and the curve comes from the backward walk, wrapping as it always did.
TEST(EventPairing, LiveSumsThatDoNotFitLeaveTheCurveToTheWalk) {
  auto alloc = [](const std::string& size, int addr) {
    return R"({"action": "alloc", "stream": 0, "frames": [], "size": )" + size + R"(, "addr": )" + std::to_string(addr) + "}";
  };
  const std::string quarter = "4611686018427387904";  // 2^62
  for (const std::string& trace : {alloc(quarter, 4096) + ", " + alloc(quarter, 8192) + ", " + alloc(quarter, 12288),
                                   alloc("9223372036854775813", 4096)}) {
    SCOPED_TRACE(trace);
    const LoadedSnapshot loaded = load_json(R"({"segments": [], "device_traces": [[)" + trace + "]]}");
    const std::unique_ptr<EventPairs> p = loaded.snapshot.device_traces[0].pairs.take();
    ASSERT_NE(p, nullptr);
    EXPECT_FALSE(p->live.exact);
    DeviceTimeline from_sums;
    EXPECT_FALSE(fill_curve_from_sums(from_sums, loaded.snapshot.events_of(0), p->live));
  }
}

// Once the window moves (--max-trace-events), the kept events start mid-trace: nothing is handed
// over, and the timeline pairs the kept events themselves.
TEST(EventPairing, ADeviceThatDroppedEventsHandsNothingOver) {
  const LoadedSnapshot loaded = load_json(kTrace, 3);
  const Snapshot& s = loaded.snapshot;
  ASSERT_EQ(s.device_traces[0].dropped, 4u);
  EXPECT_EQ(s.device_traces[0].pairs.take(), nullptr);
  const std::vector<DeviceTimeline> timelines = build_timelines(s);
  ASSERT_EQ(timelines.size(), 1u);
  // Kept: segment_alloc, alloc 65536, free_requested 65536.
  EXPECT_EQ(fields_of(timelines[0].lifetimes), (std::vector<LifetimeFields>{{1, kStillLive, 2048, kNoStack, kNoStack}}));
  EXPECT_EQ(timelines[0].pending_requests, 1u);
}

// An allocation with user_metadata gets a tagged stack after the events were stored: the pairing
// (which copied the untagged one) is not handed over, and the timeline's lifetime has the tag.
TEST(EventPairing, TaggedStacksTakeThePairingAway) {
  const LoadedSnapshot loaded = load_json(R"({"segments": [], "device_traces": [[
    {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 1, "user_metadata": "decoder",
     "frames": [{"filename": "train.py", "line": 3, "name": "step"}]}]]})");
  const Snapshot& s = loaded.snapshot;
  ASSERT_EQ(s.tagged_stacks.size(), 1u);
  EXPECT_EQ(s.device_traces[0].pairs.take(), nullptr);
  const std::vector<DeviceTimeline> timelines = build_timelines(s);
  ASSERT_EQ(timelines[0].lifetimes.size(), 1u);
  EXPECT_EQ(timelines[0].lifetimes[0].stack, s.events_of(0)[0].stack);
  EXPECT_EQ(s.str(s.tag_of(s.events_of(0)[0].stack).label), "decoder");
}

// The same timelines from the pairing handed over (the first build takes it) and from the
// analysis' own pass (the second build finds nothing to take), on every fixture.
TEST(EventPairing, TimelinesAreTheSameWithOrWithoutTheHandOver) {
  for (const std::string& name : test::fixture_names()) {
    SCOPED_TRACE(name);
    const LoadedSnapshot loaded = load_snapshot(fixture_path(name));
    const std::vector<DeviceTimeline> handed = build_timelines(loaded.snapshot);
    const std::vector<DeviceTimeline> own = build_timelines(loaded.snapshot);
    ASSERT_EQ(handed.size(), own.size());
    for (std::size_t i = 0; i < own.size(); ++i) {
      EXPECT_EQ(fields_of(handed[i].lifetimes), fields_of(own[i].lifetimes));
      EXPECT_EQ(handed[i].final_blocks, own[i].final_blocks);
      EXPECT_EQ(handed[i].actions, own[i].actions);
      EXPECT_EQ(handed[i].free_bursts.lifetimes, own[i].free_bursts.lifetimes);
      EXPECT_EQ(handed[i].oom_events, own[i].oom_events);
      EXPECT_EQ(handed[i].segment_events, own[i].segment_events);
      EXPECT_EQ(handed[i].pending_bytes, own[i].pending_bytes);
      EXPECT_EQ(handed[i].pending_streams, own[i].pending_streams);
      EXPECT_EQ(handed[i].live_from_before_window, own[i].live_from_before_window);
      expect_same_curve(handed[i], own[i]);
    }
  }
}

// The store's pass also finds each device's first implausible size and time (TraceScan), so the
// plausibility check does not walk the events again: its lines are a full walk's, in the same
// order (a time before a size on device 0; on device 1 one event with both, which names neither
// again), and a device that dropped events is walked.
TEST(EventPairing, TheStoresScanNamesWhatAWalkOverTheEventsNames) {
  const std::string json = R"({"segments": [], "device_traces": [[
    {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 10, "frames": []},
    {"action": "alloc", "addr": 8192, "size": 512, "stream": 0, "time_us": -5, "frames": []},
    {"action": "alloc", "addr": 12288, "size": 2251799813685248, "stream": 0, "time_us": 12, "frames": []},
    {"action": "oom", "addr": 0, "size": 4503599627370496, "stream": 0, "time_us": 13, "frames": []}], [
    {"action": "alloc", "addr": 4096, "size": 4503599627370496, "stream": 0, "time_us": 1152921504606846977, "frames": []}]]})";
  LoadedSnapshot loaded = load_json(json);
  Snapshot& s = loaded.snapshot;
  ASSERT_EQ(s.device_traces.size(), 2u);
  EXPECT_EQ(s.device_traces[0].scan.events, 4u);
  EXPECT_EQ(s.device_traces[0].scan.first_bad_time, 1u);
  EXPECT_EQ(s.device_traces[0].scan.first_huge_size, 2u);  // not the oom's request at 3
  EXPECT_EQ(s.device_traces[1].scan.first_bad_time, 0u);
  EXPECT_EQ(s.device_traces[1].scan.first_huge_size, 0u);
  const std::vector<std::string> expected = {
      "device 0 trace event 1 has time_us -5, not a time since the epoch",
      "device 0 trace event 2 has size 2251799813685248 B, beyond any device (more than 1 PiB); the timeline and peak are meaningless"};
  EXPECT_EQ(implausible_values(s), expected);
  for (DeviceTrace& trace : s.device_traces) trace.scan = {};  // no scan: the check walks the events
  EXPECT_EQ(implausible_values(s), expected);
  // Device 1 alone first: its one event is both, the size named first.
  LoadedSnapshot second = load_json(R"({"segments": [], "device_traces": [[], [
    {"action": "alloc", "addr": 4096, "size": 4503599627370496, "stream": 0, "time_us": 1152921504606846977, "frames": []}]]})");
  const std::vector<std::string> both = implausible_values(second.snapshot);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].rfind("device 1 trace event 0 has size", 0), 0u) << both[0];
  EXPECT_EQ(both[1].rfind("device 1 trace event 0 has time_us", 0), 0u) << both[1];
  // Events dropped (--max-trace-events 2): the kept two are walked, numbered from the window.
  const LoadedSnapshot capped = load_json(json, 2);
  ASSERT_EQ(capped.snapshot.device_traces[0].dropped, 2u);
  EXPECT_EQ(implausible_values(capped.snapshot), (std::vector<std::string>{
      "device 0 trace event 0 has size 2251799813685248 B, beyond any device (more than 1 PiB); the timeline and peak are meaningless",
      "device 1 trace event 0 has time_us 1152921504606846977, not a time since the epoch"}));
}

}  // namespace event_pairing_tests
}  // namespace memsnap
