// Every real snapshot in ../shared/corpus/real loads, and its totals match facts.json.
// Skipped (with the reason) when the corpus is not there, as in a user's clone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "analysis/analyze.h"
#include "analysis/totals.h"
#include "model/load.h"
#include "test_support.h"

namespace memsnap {
namespace corpus_tests {

using test::corpus_dir;

TEST(Corpus, EveryRealSnapshotMatchesItsFacts) {
  const auto dir = corpus_dir();
  const auto facts_path = dir / "facts.json";
  if (!std::filesystem::exists(facts_path)) {
    GTEST_SKIP() << "real corpus not found at " << dir << " (it lives in ../shared, absent from a user's clone); set MEMSNAP_CORPUS to run";
  }
  std::ifstream in(facts_path);
  const auto facts = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& f : facts) {
    const std::string name = f.at("file");
    SCOPED_TRACE(name);
    const auto loaded = load_snapshot((dir / name).string());
    const Snapshot& s = loaded.snapshot;
    const auto totals = compute_totals(s, build_timelines(s));
    const Totals& t = totals.overall;
    EXPECT_EQ(t.reserved, f.at("total_reserved_bytes").get<std::uint64_t>());
    EXPECT_EQ(t.allocated, f.at("total_allocated_bytes").get<std::uint64_t>());
    EXPECT_EQ(t.allocated + t.pending_free, f.at("total_active_bytes").get<std::uint64_t>());
    EXPECT_EQ(t.segments, f.at("n_segments").get<std::uint64_t>());
    EXPECT_EQ(t.blocks, f.at("n_blocks").get<std::uint64_t>());
    EXPECT_EQ(loaded.input.pickle_protocol, f.at("pickle_protocol").get<int>());
    EXPECT_EQ(std::count_if(s.blocks.begin(), s.blocks.end(), [](const Block& b) { return b.from_history; }),
              f.at("blocks_with_history").get<std::int64_t>());
    if (f.contains("device_traces_entries_per_device") && f["device_traces_entries_per_device"].is_array()) {
      const auto& per = f["device_traces_entries_per_device"];
      ASSERT_EQ(s.device_traces.size(), per.size());
      for (std::size_t d = 0; d < per.size(); ++d) EXPECT_EQ(s.device_traces[d].total, per[d].get<std::uint64_t>());
    }
    if (f.contains("trace_actions") && f["trace_actions"].is_object()) {
      std::map<std::string, std::uint64_t> counts;
      for (const auto& dt : s.device_traces) {
        for (const auto& e : dt.events) ++counts[action_name(e.action)];
      }
      for (const auto& [action, n] : f["trace_actions"].items()) EXPECT_EQ(counts[action], n.get<std::uint64_t>()) << action;
    }
    if (f.contains("reserved_by_device") && f["reserved_by_device"].is_object()) {
      for (const auto& [dev, bytes] : f["reserved_by_device"].items()) {
        const auto it = std::find_if(totals.devices.begin(), totals.devices.end(),
                                     [&](const DeviceTotals& d) { return std::to_string(d.device) == dev; });
        ASSERT_NE(it, totals.devices.end()) << "device " << dev;
        EXPECT_EQ(it->totals.reserved, bytes.get<std::uint64_t>());
      }
    }
    // The report's invariants hold on real data: reserved = allocated + pending + inactive per
    // device, and site bytes add up to allocated.
    const Analysis analysis = analyze(loaded);
    EXPECT_TRUE(analysis.invariant_violations.empty());
    EXPECT_FALSE(analysis.headline.empty());
    if (f.contains("trace_actions") && f["trace_actions"].is_object() && f["trace_actions"].contains("oom")) {
      EXPECT_EQ(analysis.ooms.size(), f["trace_actions"]["oom"].get<std::size_t>());
    }
    ++checked;
  }
  EXPECT_EQ(checked, 54);
}

}  // namespace corpus_tests
}  // namespace memsnap
