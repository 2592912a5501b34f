// The rest of issue 14 on the generator's fixtures (tests/fixtures/snapgen/scenarios_format4.py
// and scenarios_format.py): fx_original_trace as the site, compiled regions apart, user_metadata
// labels and --group-by, annotate text, profiler categories and kind-naming labels as the kind,
// user_defined step markers, roundup_power2_divisions, snapshot entries against the replay,
// private-pool OOM fixes, and what `memsnap dump` passes through.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "analysis/analyze.h"
#include "analysis/conclude.h"
#include "analysis/layout_replay.h"
#include "model/load.h"
#include "report/dump.h"
#include "report/json_report.h"
#include "test_support.h"

namespace memsnap {
namespace format4_tests {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;
const std::string kModel = "/home/user/project/model.py";
const std::string kTrain = "/home/user/project/train.py";

LoadedSnapshot fixture(const std::string& name) { return load_snapshot(std::string(MEMSNAP_FIXTURE_DIR) + "/" + name + ".pickle"); }

Analysis analyzed(const LoadedSnapshot& loaded, SiteGrouping grouping = SiteGrouping::Site) {
  AnalyzeOptions options;
  options.group_by = grouping;
  return analyze(loaded, options);
}

std::map<std::string, std::uint64_t> bytes_by_site(const std::vector<Site>& sites) {
  std::map<std::string, std::uint64_t> out;
  for (const Site& s : sites) out[s.site] += s.bytes;
  return out;
}

std::string dumped(const Snapshot& s, DumpWhat what) {
  std::FILE* f = std::tmpfile();
  EXPECT_EQ(write_dump(s, what, f), 0);
  std::rewind(f);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  std::fclose(f);
  return out;
}

const Pattern* pattern_of(const Analysis& a, PatternId id) {
  for (const Pattern& p : a.patterns) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

TEST(Format4, FxOriginalTraceGivesTheModelLine) {
  const LoadedSnapshot loaded = fixture("fx_original_trace");
  const Analysis a = analyzed(loaded);
  EXPECT_EQ(bytes_by_site(a.sites), (std::map<std::string, std::uint64_t>{{kModel + ":42", 32 * MiB}, {kModel + ":30", 8 * MiB}}));
  ASSERT_FALSE(a.sites.empty());
  EXPECT_EQ(a.sites[0].site, kModel + ":42");
  EXPECT_TRUE(a.sites[0].via_fx_original_trace);
  EXPECT_FALSE(a.sites[1].via_fx_original_trace);
  ASSERT_EQ(loaded.snapshot.fx_frames.size(), 1u);
  EXPECT_EQ(loaded.snapshot.str(loaded.snapshot.fx_frames[0].node_name), "addmm");
  EXPECT_EQ(loaded.snapshot.stack_size(loaded.snapshot.fx_frames[0].original), 2u);
  EXPECT_EQ(json_report(loaded, a)["top_sites"][0]["via_fx_original_trace"], true);
  const std::string frames = dumped(loaded.snapshot, DumpWhat::Frames);
  EXPECT_NE(frames.find("\"fx_node_op\":\"call_function\",\"fx_node_name\":\"addmm\",\"fx_node_target\":\"aten.addmm.default\""),
            std::string::npos);
  EXPECT_NE(frames.find("\"via_fx_original_trace\":true"), std::string::npos);
}

TEST(Format4, TwoCompiledRegionsNeverMergeIntoOneSite) {
  const LoadedSnapshot loaded = fixture("compiled_regions");
  const Analysis a = analyzed(loaded);
  ASSERT_EQ(a.sites.size(), 2u);
  EXPECT_EQ(a.sites[0].site, kTrain + ":95");
  EXPECT_EQ(a.sites[0].region, "Torch-Compiled Region: 0/0");
  EXPECT_EQ(a.sites[0].bytes, 32 * MiB);
  EXPECT_EQ(a.sites[1].site, kTrain + ":95");
  EXPECT_EQ(a.sites[1].region, "Torch-Compiled Region: 1/0");
  EXPECT_EQ(a.sites[1].bytes, 16 * MiB);
  EXPECT_EQ(json_report(loaded, a)["top_sites"][1]["region"], "Torch-Compiled Region: 1/0");
  const Analysis by_region = analyzed(loaded, SiteGrouping::Region);
  EXPECT_EQ(bytes_by_site(by_region.sites),
            (std::map<std::string, std::uint64_t>{{"Torch-Compiled Region: 0/0", 32 * MiB}, {"Torch-Compiled Region: 1/0", 16 * MiB}}));
  EXPECT_EQ(by_region.sites[0].group, "region");
}

TEST(Format4, LabelsAreShownWithTheirBytesAndGroupTheSites) {
  const LoadedSnapshot loaded = fixture("labelled_allocations");
  const Analysis a = analyzed(loaded);
  ASSERT_EQ(a.labels.size(), 2u);
  EXPECT_EQ(a.labels[0].label, "decoder");
  EXPECT_EQ(a.labels[0].bytes, 24 * MiB);
  EXPECT_EQ(a.labels[0].blocks, 3u);
  EXPECT_EQ(a.labels[1].label, "{\"module\":\"encoder\"}");
  EXPECT_EQ(a.labels[1].bytes, 16 * MiB);
  ASSERT_EQ(a.sites.size(), 1u);  // one line: labels do not split a site
  EXPECT_EQ(a.sites[0].labels, (std::vector<std::string>{"{\"module\":\"encoder\"}", "decoder"}));
  const Analysis by_label = analyzed(loaded, SiteGrouping::Label);
  EXPECT_EQ(bytes_by_site(by_label.sites),
            (std::map<std::string, std::uint64_t>{{"decoder", 24 * MiB}, {"{\"module\":\"encoder\"}", 16 * MiB}}));
  const auto report = json_report(loaded, by_label);
  EXPECT_EQ(report["group_by"], "label");
  EXPECT_EQ(report["top_sites"][0]["site"], "decoder");
  EXPECT_EQ(report["top_sites"][0]["group"], "label");
  EXPECT_EQ(report["top_sites"][0]["function"], "label");
  EXPECT_EQ(report["labels"][0]["bytes"], 24 * MiB);
  const test::CliRun run = test::run_memsnap(std::string(MEMSNAP_FIXTURE_DIR) + "/labelled_allocations.pickle --group-by label");
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("      label decoder\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("Labels (user_metadata)\n   24.00 MiB      3 blocks  decoder\n"), std::string::npos) << run.out;
  EXPECT_NE(test::run_memsnap(std::string(MEMSNAP_FIXTURE_DIR) + "/labelled_allocations.pickle --group-by frame").status, 0);
  EXPECT_NE(dumped(loaded.snapshot, DumpWhat::Blocks).find("\"label\":\"decoder\""), std::string::npos);
}

TEST(Format4, AnnotateTextIsShownOnItsAllocation) {
  const LoadedSnapshot loaded = fixture("annotated_allocation");
  const Analysis a = analyzed(loaded);
  std::map<std::string, std::vector<std::string>> notes;
  for (const Site& s : a.sites) notes[s.site] = s.notes;
  EXPECT_EQ(notes[kModel + ":42"], (std::vector<std::string>{"saved for backward; activation of layer 3"}));
  EXPECT_TRUE(notes[kModel + ":47"].empty());
  EXPECT_EQ(notes.size(), 2u);  // the annotated 4 MiB block was freed
  EXPECT_NE(dumped(loaded.snapshot, DumpWhat::Blocks).find("\"annotation\":\"saved for backward; activation of layer 3\""),
            std::string::npos);
  EXPECT_NE(dumped(loaded.snapshot, DumpWhat::Trace).find("\"action\":\"annotate\""), std::string::npos);
}

TEST(Format4, ProfilerCategoryAndKindLabelsDecideTheKind) {
  const LoadedSnapshot loaded = fixture("profiler_categories");
  const Analysis a = analyzed(loaded);
  const MemoryBudget* end = nullptr;
  for (const MemoryBudget& b : a.budgets) {
    if (b.moment == BudgetMoment::End && b.device == 0) end = &b;
  }
  ASSERT_NE(end, nullptr);
  std::map<std::pair<Category, KindSource>, std::uint64_t> rows;
  for (const BudgetRow& r : end->rows) rows[{r.kind, r.source}] += r.bytes;
  EXPECT_EQ(rows, (std::map<std::pair<Category, KindSource>, std::uint64_t>{
                      {{Category::Parameter, KindSource::ProfilerCategory}, 16 * MiB},
                      {{Category::Activation, KindSource::ProfilerCategory}, 24 * MiB},
                      {{Category::Gradient, KindSource::ProfilerCategory}, 8 * MiB},
                      {{Category::OptimizerState, KindSource::ProfilerCategory}, 16 * MiB},
                      {{Category::KvCache, KindSource::UserMetadata}, 32 * MiB}}));
  std::map<std::string, Category> kinds;
  for (const Site& s : a.sites) kinds[s.site] = s.category;
  EXPECT_EQ(kinds[kTrain + ":60"], Category::KvCache);
  EXPECT_EQ(kinds[kModel + ":42"], Category::Activation);  // the site's largest kind
  EXPECT_NE(dumped(loaded.snapshot, DumpWhat::Trace).find("\"category\":\"optimizer_state\""), std::string::npos);
}

TEST(Format4, UserDefinedMarkersAreSteps) {
  const LoadedSnapshot loaded = fixture("user_defined_steps");
  const Analysis a = analyzed(loaded);
  ASSERT_EQ(a.diagnosis.steps.size(), 1u);
  EXPECT_EQ(a.diagnosis.steps[0].source, StepSource::ProfilerStep);
  EXPECT_EQ(a.diagnosis.steps[0].marker, "ProfilerStep#N START (user_defined trace entries)");
  EXPECT_EQ(a.diagnosis.steps[0].boundaries, 4u);
}

TEST(Format4, Power2DivisionsChangeTheRoundedSize) {
  std::array<std::uint32_t, 16> four{};
  four[0] = 4;
  EXPECT_EQ(round_request(1258291), 1258496u);
  EXPECT_EQ(round_request(1258291, four), 1310720u);       // 1.25 MiB: the next quarter between 1 and 2 MiB
  EXPECT_EQ(round_request(1536, four), 1536u);             // not above 512 x 4: 512-byte rounding
  EXPECT_EQ(round_request(1 * MiB, four), 1 * MiB);        // a power of two stays
  std::array<std::uint32_t, 16> second{};
  second[1] = 4;
  EXPECT_EQ(round_request(3 * MiB + 1, second), 3 * MiB + 512 * 1024);  // [2 MiB, 4 MiB) in quarters
  EXPECT_EQ(round_request(3 * MiB + 1, four), 3 * MiB + 512);           // that interval has no divisions
  const LoadedSnapshot loaded = fixture("power2_rounding");
  const Snapshot& s = loaded.snapshot;
  EXPECT_EQ(s.settings.roundup_power2_divisions, four);
  const Analysis a = analyzed(loaded);
  ASSERT_EQ(a.timelines.size(), 1u);
  const TraceEvents& events = s.events_of(0);
  std::size_t free_index = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].action == Action::FreeRequested) free_index = i;
  }
  const auto layouts = layouts_before(s, a.timelines[0], {free_index});
  ASSERT_EQ(layouts.size(), 1u);
  std::map<std::uint64_t, std::uint64_t> occupied;
  for (const auto& [addr, live] : layouts[0].live) occupied[live.requested] = live.occupied;
  EXPECT_EQ(occupied[1258291], 1310720u);
  EXPECT_EQ(occupied[64 * MiB], 64 * MiB);
}

TEST(Format4, SnapshotEntryTheReplayCannotMatchIsAnInconsistency) {
  const Analysis a = analyzed(fixture("snapshot_entry_mismatch"));
  EXPECT_EQ(a.invariant_violations,
            (std::vector<std::string>{"device 0: the trace's snapshot entry at event 5 records 112.00 MiB active, but the replayed "
                                      "layout holds 96.00 MiB in 2 live blocks: the trace misses events there, so the replayed "
                                      "layouts (OOM verdicts, segment maps) may be off"}));
  EXPECT_TRUE(analyzed(fixture("example")).invariant_violations.empty());
}

TEST(Format4, GraphPoolOomSaysSoAndHowToFixIt) {
  const Analysis a = analyzed(fixture("graph_pool_oom"));
  ASSERT_EQ(a.ooms.size(), 1u);
  EXPECT_EQ(a.ooms[0].pool, (PoolId{1, 0}));
  EXPECT_EQ(a.ooms[0].verdict, OomVerdict::Capacity);
  const Pattern* p = pattern_of(a, PatternId::Capacity);
  ASSERT_NE(p, nullptr);
  ASSERT_FALSE(p->fix.empty());
  EXPECT_EQ(p->fix[0].id, FixId::GraphPoolOom);
  EXPECT_EQ(p->fix[0].text(),
            "the request was made inside private pool (1,0) (a CUDA graph capture or torch.cuda.use_mem_pool()), which can only "
            "grow with new segments: free memory in the default pool (torch.cuda.empty_cache() before capture), capture smaller "
            "shapes, or share one pool between graphs (torch.cuda.graph_pool_handle())");
  EXPECT_EQ(p->fix[1].id, FixId::SmallerBatch);
}

TEST(Format4, DefaultPoolOomNextToAGraphPoolNamesThePoolFixes) {
  const Analysis a = analyzed(fixture("private_pool_oom"));
  const Pattern* p = pattern_of(a, PatternId::Capacity);
  ASSERT_NE(p, nullptr);
  ASSERT_GE(p->fix.size(), 5u);
  EXPECT_EQ(p->fix[0].id, FixId::PrivatePoolsCannotServe);
  EXPECT_EQ(p->fix[0].text(),
            "6.00 GiB is inactive in private pools (CUDA graph private pool (1,0)) that the default pool cannot use: the allocator "
            "gives a private pool's memory only to the CUDA graph captures or torch.cuda.use_mem_pool() blocks that own it");
  EXPECT_EQ(p->fix[1].id, FixId::SharePoolBetweenGraphs);
  EXPECT_EQ(p->fix[2].id, FixId::CaptureFewerSizes);
  EXPECT_EQ(p->fix[3].id, FixId::ReduceOverheadWhereNeeded);
  EXPECT_EQ(p->fix[4].id, FixId::SmallerBatch);
  const Analysis capacity = analyzed(fixture("oom_capacity"));
  const Pattern* plain = pattern_of(capacity, PatternId::Capacity);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->fix[0].id, FixId::SmallerBatch);  // no private pool, no pool fixes
}

// The fix steps as (finding, fix), in the order the report gives them.
std::vector<std::pair<PatternId, FixId>> fix_steps(const Analysis& a) {
  std::vector<std::pair<PatternId, FixId>> out;
  for (const NextStep& step : a.next_steps) {
    if (step.pattern && step.fix) out.emplace_back(*step.pattern, step.fix->id);
  }
  return out;
}

// A device imbalance behind the OOM leads (its saving), then the capacity OOM's fix about this OOM
// (made in a graph's private pool), and only then its generic fixes: never before the pool fix.
TEST(Format4, APoolFixStaysBeforeTheGenericFixesBehindAnImbalance) {
  Analysis a;
  a.peak_device = 1;
  OomAnalysis oom;
  oom.event.device = 1;
  a.ooms.push_back(oom);
  Pattern capacity;
  capacity.id = PatternId::Capacity;
  capacity.verdict = Verdict::Problem;
  capacity.fix = {fix(FixId::GraphPoolOom, std::string("(1,0)")), fix(FixId::SmallerBatch), fix(FixId::LowerPrecision)};
  Pattern imbalance;
  imbalance.id = PatternId::DeviceImbalance;
  imbalance.verdict = Verdict::Problem;
  imbalance.saving_bytes = 1ull << 30;
  imbalance.fix = {fix(FixId::UseDdpNotDataParallel)};
  a.patterns = {capacity, imbalance};
  const Snapshot s;
  std::vector<FixId> order;
  for (const NextStep& step : conclude(s, a).next_steps) {
    if (step.fix) order.push_back(step.fix->id);
  }
  EXPECT_EQ(order, (std::vector<FixId>{FixId::UseDdpNotDataParallel, FixId::GraphPoolOom, FixId::SmallerBatch, FixId::LowerPrecision}));
}

// A capacity OOM leads the diagnosis, but its fixes for any workload (a smaller batch, lower
// precision) follow the steps of a finding that names what to shrink and what it saves; its
// "use activation checkpointing" is not said beside activation_pressure's modules to wrap. A fix
// about this OOM itself (it was made inside a graph's private pool) keeps the lead.
TEST(Format4, ACapacityOomsGenericFixesFollowTheSpecificOnes) {
  using P = PatternId;
  using F = FixId;
  EXPECT_EQ(fix_steps(analyzed(fixture("oom_capacity"))),
            (std::vector<std::pair<P, F>>{{P::ActivationPressure, F::CheckpointModules},
                                          {P::ActivationPressure, F::RecomputeCostMs},
                                          {P::ActivationPressure, F::SmallerMicroBatch},
                                          {P::Capacity, F::SmallerBatch},
                                          {P::Capacity, F::LowerPrecision},
                                          {P::OptimizerStateSpike, F::OptimizerNothingToFix},
                                          {P::OptimizerStateSpike, F::OptimizerIfShort}}));
  const auto pool = fix_steps(analyzed(fixture("graph_pool_oom")));
  ASSERT_GE(pool.size(), 2u);
  EXPECT_EQ(pool[0], std::pair(P::Capacity, F::GraphPoolOom));
  EXPECT_EQ(pool[1], std::pair(P::ActivationPressure, F::CheckpointModules));
  EXPECT_EQ(std::count(pool.begin(), pool.end(), std::pair(P::Capacity, F::Checkpointing)), 0);
  // No finding names a saving: the capacity OOM's own fixes, checkpointing among them, lead.
  const auto optimizer = fix_steps(analyzed(fixture("optimizer_state_oom")));
  ASSERT_GE(optimizer.size(), 2u);
  EXPECT_EQ(optimizer[0], std::pair(P::Capacity, F::SmallerBatch));
  EXPECT_EQ(optimizer[1], std::pair(P::Capacity, F::Checkpointing));
}

}  // namespace format4_tests
}  // namespace memsnap
