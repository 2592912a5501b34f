// The 2026 snapshot layout (issue 14) on the generator's 2026 / XPU fixtures
// (tests/fixtures/snapgen/scenarios_format.py): private memory pools in totals, pool tables and
// OOM verdicts; forward_frames attribution; compile_context, user_metadata and pool_id kept per
// event; pinned host memory; FX generated files; traceback text parsing.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <string>

#include "analysis/analyze.h"
#include "model/frame_facts.h"
#include "model/load.h"
#include "model/traceback_text.h"
#include "read/pickle_reader.h"
#include "report/json_report.h"
#include "test_support.h"

namespace memsnap {
namespace format_2026_tests {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;

LoadedSnapshot fixture(const std::string& name) { return load_snapshot(std::string(MEMSNAP_FIXTURE_DIR) + "/" + name + ".pickle"); }

// Bytes of the alloc events by the text `field` of their facts picks out.
std::map<std::string, std::uint64_t> alloc_bytes_by(const Snapshot& s, StrId EventFacts::*field) {
  std::map<std::string, std::uint64_t> out;
  const TraceEvents& events = s.events_of(0);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const EventFacts* f = s.facts_of_event(0, i);
    if (events[i].action == Action::Alloc && f && f->*field) out[std::string(s.str(f->*field))] += events[i].size;
  }
  return out;
}

TEST(Format2026, PrivatePoolOomIsCapacityAndNeverReusesTheGraphPool) {
  const LoadedSnapshot loaded = fixture("private_pool_oom");
  const Analysis a = analyze(loaded);
  EXPECT_TRUE(loaded.snapshot.unknown_keys.empty());
  ASSERT_EQ(a.ooms.size(), 1u);
  const OomAnalysis& o = a.ooms[0];
  EXPECT_EQ(o.pool, PoolId{});
  EXPECT_EQ(o.verdict, OomVerdict::Capacity);
  EXPECT_EQ(o.event.size, 2 * GiB);
  EXPECT_EQ(o.event.device_free, 512 * MiB);
  EXPECT_EQ(o.largest_reusable_block, 0u);
  EXPECT_EQ(o.fragments_in_pool, 0u);
  EXPECT_EQ(o.reserved_in_pool, 1 * GiB);
  EXPECT_EQ(o.allocated_in_pool, 1 * GiB);
  EXPECT_EQ(o.reserved_in_other_pools, 6 * GiB);
  EXPECT_EQ(o.inactive_in_other_pools, 6 * GiB);
  EXPECT_EQ(o.reason,
            "Live allocations of 1.00 GiB in the default pool at the OOM leave no room for the failed request of 2.00 GiB: "
            "1.00 GiB was reserved in that pool and 512.00 MiB was free on the device; 6.00 GiB more was reserved by CUDA "
            "graph private pool (1,0) (6.00 GiB of it inactive), which a request in the default pool can never use: that "
            "memory is freed only with the CUDA graphs or MemPool that own it");
  const Totals& t = a.totals.overall;
  EXPECT_EQ(t.inactive, 6 * GiB);
  EXPECT_EQ(t.inactive_in_private_pools, 6 * GiB);
  EXPECT_EQ(t.reserved_in_private_pools, 6 * GiB);
  EXPECT_EQ(t.private_pools, 1u);
  const auto report = json_report(loaded, a);
  EXPECT_EQ(report["trace"]["oom"][0]["reserved_in_other_pools_at_oom"], 6 * GiB);
  EXPECT_EQ(report["totals"]["inactive_in_private_pools"], 6 * GiB);
}

TEST(Format2026, GraphPoolsHoldingMostReservedAreTabledByPool) {
  const LoadedSnapshot loaded = fixture("graph_pools_hold_most");
  const Analysis a = analyze(loaded);
  const Totals& t = a.totals.overall;
  EXPECT_EQ(t.reserved, 9 * GiB);
  EXPECT_EQ(t.reserved_in_private_pools, 8 * GiB);
  EXPECT_EQ(t.allocated_in_private_pools, 7 * GiB);
  EXPECT_EQ(t.inactive_in_private_pools, 1 * GiB);
  EXPECT_EQ(t.private_pools, 2u);
  ASSERT_EQ(a.memory_pools.size(), 3u);
  EXPECT_EQ(a.memory_pools[0].pool, (PoolId{0, 0}));
  EXPECT_EQ(a.memory_pools[0].reserved, 1 * GiB);
  EXPECT_EQ(a.memory_pools[1].pool, (PoolId{0, 1}));
  EXPECT_EQ(a.memory_pools[1].reserved, 3 * GiB);
  EXPECT_EQ(a.memory_pools[2].pool, (PoolId{1, 0}));
  EXPECT_EQ(a.memory_pools[2].reserved, 5 * GiB);
  EXPECT_EQ(a.memory_pools[2].inactive, 1 * GiB);
  const auto report = json_report(loaded, a);
  EXPECT_EQ(report["memory_pools"][2]["kind"], "cuda_graph");
  EXPECT_EQ(report["memory_pools"][1]["kind"], "graph_pool_or_mempool");
  EXPECT_EQ(report["memory_pools"][2]["label"], "CUDA graph private pool (1,0)");
}

TEST(Format2026, BackwardMemoryIsAttributedToTheForwardLine) {
  const LoadedSnapshot loaded = fixture("forward_frames_backward");
  const Analysis a = analyze(loaded);
  std::map<std::string, std::pair<std::uint64_t, bool>> sites;
  for (const Site& s : a.sites) sites[s.site] = {s.bytes, s.via_forward_frames};
  const std::string model = "/home/user/project/model.py";
  EXPECT_EQ(sites[model + ":42"], std::make_pair(24 * MiB, true));
  EXPECT_EQ(sites[model + ":47"], std::make_pair(24 * MiB, true));
  EXPECT_EQ(sites[model + ":30"], std::make_pair(16 * MiB, false));
  EXPECT_EQ(sites.size(), 3u);
  EXPECT_EQ(loaded.snapshot.block_forward_stacks.size(), 2u);
}

TEST(Format2026, CompiledRegionsAndLabelsAreKeptPerEvent) {
  const LoadedSnapshot regions = fixture("compiled_regions");
  EXPECT_EQ(alloc_bytes_by(regions.snapshot, &EventFacts::compile_context),
            (std::map<std::string, std::uint64_t>{{"Torch-Compiled Region: 0/0", 32 * MiB}, {"Torch-Compiled Region: 1/0", 16 * MiB}}));
  const LoadedSnapshot labels = fixture("labelled_allocations");
  EXPECT_EQ(alloc_bytes_by(labels.snapshot, &EventFacts::user_metadata),
            (std::map<std::string, std::uint64_t>{{"{\"module\":\"encoder\"}", 16 * MiB}, {"decoder", 24 * MiB}}));
  EXPECT_TRUE(labels.snapshot.unknown_keys.empty());
}

// PyTorch writes compile_context "N/A" in every entry: such an entry, with nothing else, keeps
// no facts; any other text (even of three characters) or another key is kept.
TEST(Format2026, OnlyEntriesThatSaySomethingKeepFacts) {
  const std::string entry = R"({"action": "alloc", "addr": 1, "size": 512, "stream": 0, "frames": [])";
  const std::string json = R"({"segments": [], "device_traces": [[)" + entry + R"(, "compile_context": "N/A"}, )" + entry +
                           R"(, "compile_context": "N/B"}, )" + entry + R"(, "compile_context": "N/A", "user_metadata": "x"}, )" +
                           entry + R"(, "compile_context": "N/A", "pool_id": [0, 0]}]]})";
  const auto loaded = test::load_bytes(std::vector<std::uint8_t>(json.begin(), json.end()));
  const Snapshot& s = loaded.snapshot;
  ASSERT_EQ(s.event_facts.size(), 1u);
  ASSERT_EQ(s.event_facts[0].size(), 2u);
  EXPECT_EQ(s.event_facts[0][0].entry, 1u);
  EXPECT_EQ(s.strings[s.event_facts[0][0].compile_context], "N/B");
  EXPECT_EQ(s.event_facts[0][1].entry, 2u);
  EXPECT_EQ(s.strings[s.event_facts[0][1].user_metadata], "x");
  EXPECT_EQ(s.strings[s.event_facts[0][1].compile_context], "");
}

// The inline check the builder and the trace split ask first: true only for an entry with no
// extra field but compile_context, absent or "N/A"; anything else is left to the full check.
TEST(Format2026, PlainEntriesAreToldInlineAndNothingElseIs) {
  const auto with = [](std::initializer_list<std::pair<TraceField, Value>> extras) {
    TraceFields f;
    for (const auto& [field, v] : extras) f.extra[extra_slot(field)] = v;
    return plainly_no_event_facts(f);
  };
  const auto str = [](const char* text) { return Value::string(text, static_cast<std::uint32_t>(std::strlen(text))); };
  EXPECT_TRUE(with({}));
  EXPECT_TRUE(with({{TraceField::CompileContext, str("N/A")}}));
  EXPECT_FALSE(with({{TraceField::CompileContext, str("N/B")}}));
  EXPECT_FALSE(with({{TraceField::CompileContext, str("N/A ")}}));
  EXPECT_FALSE(with({{TraceField::CompileContext, str("")}}));  // empty says nothing too, but the full check tells
  EXPECT_FALSE(with({{TraceField::CompileContext, Value::integer(3)}}));
  EXPECT_FALSE(with({{TraceField::CompileContext, str("N/A")}, {TraceField::UserMetadata, str("x")}}));
  EXPECT_FALSE(with({{TraceField::PoolId, Value::integer(0)}}));
  EXPECT_FALSE(with({{TraceField::ForwardFrames, Value::none()}, {TraceField::Category, str("")}}));
}

TEST(Format2026, HostOnlyHistoryIsItsOwnSection) {
  const LoadedSnapshot loaded = fixture("host_only");
  const Analysis a = analyze(loaded);
  EXPECT_TRUE(a.host.present);
  EXPECT_EQ(a.host.totals.reserved, 4 * GiB);
  EXPECT_EQ(a.host.totals.allocated, 3 * GiB);
  EXPECT_EQ(a.host.totals.inactive, 1 * GiB);
  EXPECT_EQ(a.host.events, 10u);
  ASSERT_TRUE(a.host.peak_live.has_value());
  EXPECT_EQ(*a.host.peak_live, 4 * GiB);
  EXPECT_EQ(a.host.peak_index, 8u);
  ASSERT_EQ(a.host.sites.size(), 1u);
  EXPECT_EQ(a.host.sites[0].site, "/home/user/project/train.py:77");
  EXPECT_EQ(a.host.sites[0].bytes, 3 * GiB);
  EXPECT_EQ(a.totals.overall.reserved, 64 * MiB);  // host memory is not device memory
  bool said_record_cuda = false;
  for (const Sentence& u : a.uncertainties) {
    EXPECT_EQ(u.text().find("no trace history"), std::string::npos) << u.text();
    said_record_cuda |= u.text().starts_with("device history was not recorded (record_cuda=False)");
  }
  EXPECT_TRUE(said_record_cuda);
}

TEST(Format2026, XpuLayoutReads) {
  const LoadedSnapshot loaded = fixture("xpu_layout");
  const Analysis a = analyze(loaded);
  EXPECT_TRUE(loaded.snapshot.unknown_keys.empty());
  EXPECT_EQ(loaded.snapshot.settings.conf, "expandable_segments:True");
  EXPECT_EQ(a.totals.overall.allocated, 32 * MiB);
  EXPECT_FALSE(a.host.present);
}

TEST(Format2026, FxGeneratedFilesAreGeneratedCode) {
  EXPECT_TRUE(frame_facts("/tmp/tmpk2j1/fx_graph_module_7f3a.py", "forward") & kGeneratedCode);
  EXPECT_TRUE(frame_facts("fx_generated_0a1b.py", "forward") & kGeneratedCode);
  EXPECT_FALSE(frame_facts("/home/user/project/model.py", "forward") & kGeneratedCode);
}

TEST(Format2026, TracebackTextGivesFileLineAndFunction) {
  const auto frames = parse_traceback("  File \"/home/u/train.py\", line 88, in train_step\n    out = model(x)\n"
                                      "  File \"/home/u/model.py\", line 42, in forward\n    return self.fc(x)\n");
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].file, "/home/u/train.py");
  EXPECT_EQ(frames[0].line, 88);
  EXPECT_EQ(frames[1].name, "forward");
  EXPECT_TRUE(parse_traceback("no frames here").empty());
}

}  // namespace format_2026_tests
}  // namespace memsnap
