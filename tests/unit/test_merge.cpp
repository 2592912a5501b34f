// `memsnap merge`: per-rank JSON reports merged give exactly the report `memsnap DIR` writes on
// the same snapshots (the generated DDP run, rank 3 the outlier); reports that cannot be used
// are skipped with the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace memsnap {
namespace merge_tests {

namespace fs = std::filesystem;

using test::TempDir;

const std::string kRanks = std::string(MEMSNAP_FIXTURE_DIR) + "/ddp_ranks";

// One report per rank, as a job array would write them.
void write_rank_reports(const fs::path& out) {
  for (int rank = 0; rank < 4; ++rank) {
    const std::string snap = kRanks + "/rank" + std::to_string(rank) + ".pickle";
    const test::CliRun r = test::run_memsnap(snap + " --format json -o " + (out / ("rank" + std::to_string(rank) + ".json")).string());
    ASSERT_EQ(r.status, 0) << r.err;
  }
}

TEST(Merge, MergedReportsEqualTheDirectoryReport) {
  TempDir reports("merge_reports");
  write_rank_reports(reports.path);
  const test::CliRun dir = test::run_memsnap(kRanks + " --format json");
  ASSERT_EQ(dir.status, 0) << dir.err;
  const test::CliRun merged = test::run_memsnap("merge " + reports.path.string() + " --format json");
  ASSERT_EQ(merged.status, 0) << merged.err;
  EXPECT_EQ(merged.out, dir.out);
  const auto j = nlohmann::json::parse(merged.out);
  EXPECT_EQ(j["outlier_ranks"], nlohmann::json::array({3}));
  EXPECT_EQ(j["rank_comparison"]["outliers"][0]["sites"][0]["site"], "/home/user/project/train.py:140");
  // Files named one by one, in any order, give the same.
  const auto r = [&](int i) { return (reports.path / ("rank" + std::to_string(i) + ".json")).string(); };
  EXPECT_EQ(test::run_memsnap("merge " + r(2) + " " + r(0) + " " + r(3) + " " + r(1) + " --format json").out, dir.out);
}

TEST(Merge, TextNamesTheOutlierAndItsSite) {
  TempDir reports("merge_text");
  write_rank_reports(reports.path);
  const test::CliRun merged = test::run_memsnap("merge " + reports.path.string());
  ASSERT_EQ(merged.status, 0) << merged.err;
  EXPECT_EQ(merged.out.substr(0, merged.out.find('\n')),
            "Rank 3 of 4 stands out: rank 3 has peak 1.30 GiB against a median of 818.12 MiB (+512.00 MiB); "
            "/home/user/project/train.py:140 (cache_eval_batches) explains +512.00 MiB of it against rank 0.");
  EXPECT_NE(merged.out.find("     3    1.30 GiB    1.33 GiB    1.17 GiB  168.60 MiB    0  * train.py:140 (43%)\n"), std::string::npos)
      << merged.out;
}

TEST(Merge, UnusableReportsAreSkippedWithTheReason) {
  TempDir reports("merge_skip");
  write_rank_reports(reports.path);
  std::ofstream(reports.path / "zz_broken.json") << "{\"schema\": \"memsnap.report/1\"";
  std::ifstream in(reports.path / "rank1.json");
  auto old = nlohmann::json::parse(in);
  in.close();
  old.erase("rank_summary");
  std::ofstream(reports.path / "rank1.json") << old.dump();
  const test::CliRun merged = test::run_memsnap("merge " + reports.path.string() + " --format json");
  ASSERT_EQ(merged.status, 0) << merged.err;
  const auto j = nlohmann::json::parse(merged.out);
  EXPECT_EQ(j["ranks"].size(), 3u);
  EXPECT_EQ(j["rank_comparison"]["skipped"],
            nlohmann::json::array({"rank1.json: the report has no rank_summary (written by an older memsnap); re-run memsnap on the snapshot",
                                   "zz_broken.json: not JSON"}));
  const test::CliRun none = test::run_memsnap("merge " + (reports.path / "zz_broken.json").string());
  EXPECT_EQ(none.status, 1);
  EXPECT_EQ(none.err, "memsnap: error: " + (reports.path / "zz_broken.json").string() +
                          ": none of the 1 reports can be merged (first: zz_broken.json: not JSON); pass the JSON reports "
                          "written by `memsnap rankN.pickle --format json`\n");
}

}  // namespace merge_tests
}  // namespace memsnap
