// Moment queries (`memsnap at`, `memsnap blocks`) and their exports: the live set at an event
// equals a naive replay to that event on every fixture; the OOM and peak moments carry the
// generator's exact numbers; filters, grouping, the folded stacks and the CSV parse back.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analysis/timeline.h"
#include "model/load.h"
#include "query/moment_view.h"
#include "test_support.h"

namespace memsnap {
namespace query_tests {

std::string fixture(const std::string& name) { return std::string(MEMSNAP_FIXTURE_DIR) + "/" + name; }

// The live allocations (address -> requested bytes) after the first `index` events, by undoing
// the later events one by one on the final state: no lifetimes, no layout replay.
std::map<std::uint64_t, std::uint64_t> naive_live(const Snapshot& s, std::int64_t device, std::size_t index) {
  std::map<std::uint64_t, std::uint64_t> live;
  s.for_each_live_block(device, [&](const Block& b) { live[b.address] = b.requested_size; });
  const TraceEvents& events = s.events_of(device);
  for (std::size_t k = events.size(); k-- > index;) {
    const TraceEvent& e = events[k];
    if (e.action == Action::Alloc) live.erase(e.addr);
    if (e.action == Action::FreeCompleted) live[e.addr] = e.size;
  }
  return live;
}

MomentView view(const LoadedSnapshot& loaded, const std::vector<DeviceTimeline>& timelines, MomentSpec spec,
                std::optional<std::int64_t> device = std::nullopt) {
  MomentQuery q;
  q.moment = spec;
  q.device = device;
  return view_moment(loaded.snapshot, timelines, q);
}

TEST(Query, LiveSetAtAnEventEqualsANaiveReplayOnEveryFixture) {
  std::size_t checked = 0;
  for (const std::string& name : test::fixture_names()) {
    const auto loaded = load_snapshot(fixture(name + ".pickle"));
    const auto timelines = build_timelines(loaded.snapshot);
    for (const DeviceTimeline& t : timelines) {
      for (std::size_t n : {std::size_t{0}, t.events / 3, t.events / 2, t.events - 1}) {
        MomentSpec spec;
        spec.kind = MomentKind::Event;
        spec.number = n;
        const MomentView v = view(loaded, timelines, spec, t.device);
        std::map<std::uint64_t, std::uint64_t> got;
        for (const LiveAllocation& a : v.live.allocations) got[a.address] = a.requested;
        EXPECT_EQ(got, naive_live(loaded.snapshot, t.device, n + 1)) << name << " device " << t.device << " event " << n;
        EXPECT_EQ(static_cast<std::int64_t>(v.requested), t.curve[n + 1]) << name << " event " << n;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40u);
}

TEST(Query, TheOomMomentHasTheGeneratorsLayout) {
  const auto loaded = load_snapshot(fixture("oom_fragmentation.pickle"));
  const auto timelines = build_timelines(loaded.snapshot);
  MomentSpec spec;
  spec.kind = MomentKind::Oom;
  const MomentView v = view(loaded, timelines, spec);
  const auto oom = test::fixture_truth("oom_fragmentation")["trace"]["oom"][0];
  EXPECT_EQ(v.live.moment.index, 790u);  // the OOM is the 791st event; its state is the one before it
  EXPECT_EQ(v.reserved, oom["reserved_at_oom"].get<std::uint64_t>());
  EXPECT_EQ(v.bytes, oom["allocated_at_oom"].get<std::uint64_t>());
  ASSERT_EQ(v.pools.size(), 1u);
  EXPECT_EQ(v.pools[0].free, oom["inactive_same_pool_stream_at_oom"].get<std::uint64_t>());
  EXPECT_EQ(v.pools[0].largest_free_block, oom["largest_inactive_same_pool_stream_at_oom"].get<std::uint64_t>());
  EXPECT_EQ(v.pools[0].segments, 25u);
}

TEST(Query, ThePeakMomentHoldsThePeak) {
  for (const std::string& name : {"oom_fragmentation", "healthy_training", "multi_device"}) {
    const auto loaded = load_snapshot(fixture(std::string(name) + ".pickle"));
    const auto timelines = build_timelines(loaded.snapshot);
    MomentSpec spec;
    spec.kind = MomentKind::Peak;
    const MomentView v = view(loaded, timelines, spec);
    EXPECT_EQ(v.requested, test::fixture_truth(name)["totals"]["peak_allocated"].get<std::uint64_t>()) << name;
  }
}

TEST(Query, TheEndMomentIsTheFinalState) {
  const auto loaded = load_snapshot(fixture("healthy_training.pickle"));
  const auto timelines = build_timelines(loaded.snapshot);
  const MomentView v = view(loaded, timelines, MomentSpec{});
  const auto t = test::fixture_truth("healthy_training")["totals"];
  EXPECT_EQ(v.bytes, t["allocated"].get<std::uint64_t>() + t["pending_free"].get<std::uint64_t>());
  EXPECT_EQ(v.reserved, t["reserved"].get<std::uint64_t>());
  std::uint64_t free = 0;
  for (const PoolLayout& p : v.pools) free += p.free;
  EXPECT_EQ(free, t["inactive"].get<std::uint64_t>());
}

TEST(Query, TimeAndAnnotationMomentsLandOnTheirEvents) {
  const auto loaded = load_snapshot(fixture("healthy_training.pickle"));
  const auto timelines = build_timelines(loaded.snapshot);
  const TraceEvents& events = loaded.snapshot.events_of(0);
  const StepMark& mark = timelines[0].steps.at(2);
  const MomentView at_mark = view(loaded, timelines, annotation_spec(mark.name));
  std::size_t first = 0;
  for (const StepMark& m : timelines[0].steps) {
    if (m.name == mark.name) { first = m.event_index; break; }
  }
  EXPECT_EQ(at_mark.live.moment.index, first);
  auto abs = parse_time_spec(std::to_string(events[99].time_us));
  ASSERT_TRUE(abs);
  std::size_t expected = 100;
  while (expected < events.size() && events[expected].time_us == events[99].time_us) ++expected;
  EXPECT_EQ(view(loaded, timelines, *abs).live.moment.index, expected);
  auto rel = parse_time_spec("0us");
  ASSERT_TRUE(rel && rel->relative);
  EXPECT_EQ(parse_time_spec("1.5ms")->time_us, 1500);
  EXPECT_EQ(parse_time_spec("2s")->time_us, 2000000);
  EXPECT_FALSE(parse_time_spec("2x"));
  EXPECT_FALSE(parse_time_spec("-1ms"));
  EXPECT_EQ(annotation_spec("ProfilerStep#3").occurrence, 3u);
  EXPECT_EQ(annotation_spec("ProfilerStep#3").annotation, "ProfilerStep");
}

TEST(QueryCli, AtPeakPrintsTheLiveSetAndLayout) {
  const test::CliRun r = test::run_memsnap("at " + fixture("oom_fragmentation.pickle") + " --peak");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Device 0, at the peak (after 51 events) (state after 51 of 791 events, time_us 1713558427251572)\n"
                       "Live: 15.00 GiB requested in 25 blocks (15.00 GiB occupied); reserved 15.00 GiB\n"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("      9.00 GiB   60.0%      1 blocks  /home/user/project/model.py:95  (activation)\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  large pool, stream 0: reserved 15.00 GiB, free 0 B, largest free block 0 B, 25 segments (0 wholly free)\n"),
            std::string::npos) << r.out;
}

TEST(QueryCli, AtJsonGroupsByKindAndFilters) {
  const test::CliRun r = test::run_memsnap("at " + fixture("oom_fragmentation.pickle") +
                                           " --peak --format json --group-by file --min-size 1GiB --frame 'model\\.py:9[0-9]'");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "memsnap.at/1");
  EXPECT_EQ(j["moment"]["kind"], "peak");
  EXPECT_EQ(j["moment"]["event_index"], 51);
  EXPECT_EQ(j["totals"]["requested"], 9663676416);
  EXPECT_EQ(j["totals"]["blocks"], 1);
  ASSERT_EQ(j["groups"].size(), 1u);
  EXPECT_EQ(j["groups"][0]["key"], "/home/user/project/model.py");
  EXPECT_EQ(j["groups"][0]["kind"], "activation");
  EXPECT_EQ(j["by_kind"][0]["kind"], "activation");
  EXPECT_EQ(j["filter"]["min_size"], 1073741824);
}

TEST(QueryCli, BlocksAreJsonLinesWithTheirWholeStory) {
  const test::CliRun r = test::run_memsnap("blocks " + fixture("oom_fragmentation.pickle") + " --peak --site model.py:95");
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<nlohmann::json> blocks;
  while (std::getline(lines, line)) blocks.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(blocks.size(), 1u);
  const auto& b = blocks[0];
  EXPECT_EQ(b["requested_size"], 9663676416);
  EXPECT_EQ(b["site"], "/home/user/project/model.py:95");
  EXPECT_EQ(b["pool"], "large");
  // The 9 GiB profile-run workspace: allocated by event 49, free requested by 50, freed by 51;
  // the peak is the state after 51 events, just before that free completes.
  EXPECT_EQ(b["alloc_event"], 49);
  EXPECT_EQ(b["free_event"], 51);
  EXPECT_EQ(b["free_time_us"], 1713558427251602);
  EXPECT_EQ(b["stack"][0].get<std::string>().rfind("/home/user/project/model.py:95:forward", 0), 0u);
}

TEST(QueryCli, CollapsedStacksAddUpToTheLiveSet) {
  const std::string snap = fixture("healthy_training.pickle");
  const test::CliRun folded = test::run_memsnap("at " + snap + " --step 2 --format collapsed");
  const test::CliRun json = test::run_memsnap("at " + snap + " --step 2 --format json");
  ASSERT_EQ(folded.status, 0) << folded.err;
  std::istringstream lines(folded.out);
  std::string line;
  std::uint64_t total = 0;
  std::size_t count = 0;
  while (std::getline(lines, line)) {
    const auto space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos) << line;
    EXPECT_NE(line.find(';'), std::string::npos) << line;  // frames outermost first, ';'-separated
    total += std::stoull(line.substr(space + 1));
    ++count;
  }
  EXPECT_EQ(total, nlohmann::json::parse(json.out)["totals"]["requested"].get<std::uint64_t>());
  EXPECT_GT(count, 2u);
}

TEST(QueryCli, CsvHasOneRowPerGroup) {
  const test::CliRun csv = test::run_memsnap("at " + fixture("oom_fragmentation.pickle") + " --peak --format csv");
  ASSERT_EQ(csv.status, 0) << csv.err;
  EXPECT_EQ(csv.out,
            "key,kind,requested,bytes,blocks,percent,what\n"
            "/home/user/project/model.py:95,activation,9663676416,9663676416,1,60.00,/home/user/project/model.py:95 (forward)\n"
            "/home/user/project/serve.py:38,parameter,6442450944,6442450944,24,40.00,/home/user/project/serve.py:38 (load_model)\n");
}

TEST(QueryCli, BadMomentsAndOptionsAreOneLineErrors) {
  const std::string snap = fixture("healthy_training.pickle");
  const test::CliRun oom = test::run_memsnap("at " + snap + " --oom 0");
  EXPECT_EQ(oom.status, 1);
  EXPECT_EQ(oom.err, "memsnap: error: " + snap + ": --oom 0: the trace has 0 OOM event(s); use --peak or --event N instead\n");
  const test::CliRun event = test::run_memsnap("at " + snap + " --event 5000");
  EXPECT_EQ(event.status, 1);
  EXPECT_EQ(event.err, "memsnap: error: " + snap + ": --event 5000: device 0 has 1150 kept trace events; pick one of 0..1149\n");
  const test::CliRun time = test::run_memsnap("at " + snap + " --time 2x");
  EXPECT_EQ(time.status, 2);
  EXPECT_EQ(time.err, "memsnap: error: --time 2x: not a time; use 1.5s, 200ms, 300us (since the first event) or an absolute time_us\n");
  EXPECT_EQ(test::run_memsnap("at " + snap + " --peak --event 3").status, 2);  // one moment at a time
  EXPECT_EQ(test::run_memsnap("at " + snap + " --frame '('").status, 2);
  EXPECT_EQ(test::run_memsnap("blocks " + snap + " --min-size lots").status, 2);
}

}  // namespace query_tests
}  // namespace memsnap
