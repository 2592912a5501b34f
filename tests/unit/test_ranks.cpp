// Rank directories: a generated DDP run on 4 ranks with one known outlier (rank 3 caches
// 4 x 128 MiB of validation batches at train.py:140), rank numbers from file names, parallel
// loading, files that are not snapshots, and the CLI's ranks JSON.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "analysis/conclude.h"
#include "query/rank_directory.h"
#include "analysis/ranks.h"
#include "base/error.h"
#include "test_support.h"

namespace memsnap {
namespace ranks_tests {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) { return fs::path(MEMSNAP_FIXTURE_DIR) / name; }

nlohmann::json group_truth() {
  std::ifstream in(fixture("ddp_ranks.group.json"));
  return nlohmann::json::parse(in);
}

using test::TempDir;

TEST(Ranks, RankFromTheDigitsInTheFileName) {
  EXPECT_EQ(rank_from_name("rank3.pickle"), 3);
  EXPECT_EQ(rank_from_name("/x/y/snapshot_rank_12.pkl"), 12);
  EXPECT_EQ(rank_from_name("rank0_step100.pickle"), 0);
  EXPECT_EQ(rank_from_name("mem_r5.pickle"), 5);
  EXPECT_EQ(rank_from_name("oom_snapshot_dev7.pickle.gz"), 7);
  EXPECT_EQ(rank_from_name("snapshot.pickle"), -1);
}

TEST(Ranks, FourRanksNameTheOutlierAndItsSite) {
  const auto truth = group_truth();
  const auto& expect = truth["expect"];
  const RankReport r = analyze_rank_directory(fixture("ddp_ranks").string(), {}, {}).ranks;
  ASSERT_EQ(r.ranks.size(), 4u);
  std::vector<std::int64_t> ranks;
  for (const auto& x : r.ranks) ranks.push_back(x.rank);
  EXPECT_EQ(ranks, expect["ranks"].get<std::vector<std::int64_t>>());
  EXPECT_EQ(r.metric, RankMetric::PeakAllocated);
  EXPECT_TRUE(r.skipped.empty());
  ASSERT_EQ(r.outliers.size(), 1u);
  const RankOutlier& o = r.outliers.front();
  EXPECT_EQ(std::vector<std::int64_t>{o.rank}, expect["outlier_ranks"].get<std::vector<std::int64_t>>());
  EXPECT_NE(o.reference_rank, o.rank);
  ASSERT_FALSE(o.sites.empty());
  EXPECT_EQ(o.sites.front().site, expect["explaining_site"].get<std::string>());
  EXPECT_EQ(o.sites.front().delta_bytes, expect["explaining_bytes"].get<std::int64_t>());
  EXPECT_EQ(o.sites.front().delta_blocks, expect["explaining_blocks"].get<std::int64_t>());
  EXPECT_EQ(o.value - r.ranks[static_cast<std::size_t>(o.reference_rank)].metric, expect["explaining_bytes"].get<std::int64_t>());
  EXPECT_EQ(r.ranks[r.body].rank, 3);
  EXPECT_EQ(ranks_headline(r).rfind("Rank 3 of 4 stands out", 0), 0u) << ranks_headline(r);
  // Patterns across ranks: DDP replication on every rank, no leak anywhere.
  const auto it = std::find_if(r.patterns.begin(), r.patterns.end(), [](const Pattern& p) { return p.id == PatternId::ReplicatedGradients; });
  ASSERT_NE(it, r.patterns.end());
  EXPECT_EQ(it->confidence, Confidence::High);
  EXPECT_EQ(it->evidence.front().text(), "found on all 4 ranks");
  for (const auto& id : expect["patterns_absent"]) {
    for (const auto& p : r.patterns) EXPECT_NE(name_of(p.id), id.get<std::string>());
  }
  // Per-rank totals match the generator's truth of each file.
  for (const auto& x : r.ranks) {
    const auto& t = truth["files"]["rank" + std::to_string(x.rank) + ".pickle"]["totals"];
    const Totals& got = x.analysis.totals.overall;
    EXPECT_EQ(got.reserved, t["reserved"].get<std::uint64_t>());
    EXPECT_EQ(got.allocated, t["allocated"].get<std::uint64_t>());
    EXPECT_EQ(got.inactive, t["inactive"].get<std::uint64_t>());
    EXPECT_EQ(got.peak_allocated, t["peak_allocated"].get<std::int64_t>());
    EXPECT_EQ(x.metric, t["peak_allocated"].get<std::int64_t>());
    EXPECT_EQ(x.oom_events, 0u);
  }
}

TEST(Ranks, ParallelLoadingMatchesSerial) {
  const RankReport serial = analyze_rank_directory(fixture("ddp_ranks").string(), {}, {}, 1).ranks;
  const RankReport parallel = analyze_rank_directory(fixture("ddp_ranks").string(), {}, {}, 8).ranks;
  ASSERT_EQ(serial.ranks.size(), parallel.ranks.size());
  for (std::size_t i = 0; i < serial.ranks.size(); ++i) {
    EXPECT_EQ(serial.ranks[i].rank, parallel.ranks[i].rank);
    EXPECT_EQ(serial.ranks[i].metric, parallel.ranks[i].metric);
    EXPECT_EQ(serial.ranks[i].analysis.headline, parallel.ranks[i].analysis.headline);
  }
  EXPECT_EQ(ranks_headline(serial), ranks_headline(parallel));
}

TEST(Ranks, BalancedRanksHaveNoOutlier) {
  TempDir dir("memsnap_ranks_balanced");
  for (int r = 0; r < 3; ++r) fs::copy_file(fixture("ddp_ranks") / ("rank" + std::to_string(r) + ".pickle"), dir.path / ("snap_rank" + std::to_string(r) + ".pickle"));
  const RankReport rep = analyze_rank_directory(dir.path.string(), {}, {}).ranks;
  ASSERT_EQ(rep.ranks.size(), 3u);
  EXPECT_TRUE(rep.outliers.empty());
  EXPECT_EQ(ranks_headline(rep).rfind("The 3 ranks are balanced", 0), 0u) << ranks_headline(rep);
}

TEST(Ranks, FilesThatAreNotSnapshotsAreSkipped) {
  TempDir dir("memsnap_ranks_skip");
  fs::copy_file(fixture("ddp_ranks") / "rank0.pickle", dir.path / "rank0.pickle");
  fs::copy_file(fixture("ddp_ranks") / "rank3.pickle", dir.path / "rank1.pickle");
  std::ofstream(dir.path / "rank2.pickle") << "not a pickle";
  std::ofstream(dir.path / "README.md") << "notes";
  std::ofstream(dir.path / ".hidden.pickle") << "x";
  const RankReport rep = analyze_rank_directory(dir.path.string(), {}, {}).ranks;
  ASSERT_EQ(rep.ranks.size(), 2u);
  ASSERT_EQ(rep.skipped.size(), 1u);
  EXPECT_EQ(rep.skipped.front().rfind("rank2.pickle: ", 0), 0u) << rep.skipped.front();
  // Two ranks: the higher one stands out, against the other.
  ASSERT_EQ(rep.outliers.size(), 1u);
  EXPECT_EQ(rep.outliers.front().rank, 1);
  EXPECT_EQ(rep.outliers.front().reference_rank, 0);
}

TEST(Ranks, DirectoryWithoutSnapshotsIsAnInputError) {
  TempDir dir("memsnap_ranks_empty");
  EXPECT_THROW(analyze_rank_directory(dir.path.string(), {}, {}), InputError);
  std::ofstream(dir.path / "rank0.pickle") << "garbage";
  EXPECT_THROW(analyze_rank_directory(dir.path.string(), {}, {}), InputError);
}

TEST(Ranks, CliJsonHasRanksAndOutliers) {
  const auto expect = group_truth()["expect"];
  const test::CliRun r = test::run_memsnap(fixture("ddp_ranks").string() + " --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "memsnap.report/1");
  ASSERT_EQ(j["ranks"].size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& e = j["ranks"][i];
    EXPECT_EQ(e["rank"], i);
    for (const char* key : {"rank", "path", "totals", "oom_events", "top_sites"}) EXPECT_TRUE(e.contains(key)) << key;
    EXPECT_TRUE(e["totals"].contains("peak_allocated"));
    EXPECT_FALSE(e["top_sites"].empty());
  }
  EXPECT_EQ(j["outlier_ranks"], expect["outlier_ranks"]);
  EXPECT_EQ(j["rank_comparison"]["outliers"][0]["sites"][0]["site"], expect["explaining_site"]);
  EXPECT_EQ(j["rank_comparison"]["body_rank"], 3);
  EXPECT_EQ(j["ranks"][3]["top_sites"][0]["site"], expect["explaining_site"]);
  bool replicated = false;
  for (const auto& p : j["patterns"]) replicated |= p["id"] == "replicated_gradients";
  EXPECT_TRUE(replicated);
  const test::CliRun text = test::run_memsnap(fixture("ddp_ranks").string());
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("rank 3 stands out"), std::string::npos);
}

}  // namespace ranks_tests
}  // namespace memsnap
