// How ranks are told apart: balanced ranks, one rank far from a robust centre, ranks that differ
// throughout (never "balanced"), two ranks 2x apart, OOM-only outliers, and the warnings when the
// files are plainly not ranks of one job. Synthetic rank results: only the compared metric and
// the model state matter here.
#include <gtest/gtest.h>

#include "analysis/conclude.h"
#include "analysis/ranks.h"

namespace memsnap {
namespace rank_spread_tests {

constexpr std::int64_t GiB = 1ll << 30;

std::optional<RankResult> rank_with_peak(std::int64_t peak, std::uint64_t parameters = 0, std::uint64_t gradients = 0) {
  RankResult x;
  x.analysis.totals.overall.peak_allocated = peak;
  x.analysis.totals.overall.allocated = static_cast<std::uint64_t>(peak / 2);
  x.analysis.headline = "body headline";
  x.model.parameters = parameters;
  x.model.gradients = gradients;
  return x;
}

RankReport compare(std::vector<std::optional<RankResult>> results) {
  std::vector<std::string> files, errors(results.size());
  for (std::size_t i = 0; i < results.size(); ++i) files.push_back("rank" + std::to_string(i) + ".pickle");
  return compare_ranks("dir", files, std::move(results), errors);
}

std::vector<std::int64_t> outlier_ranks(const RankReport& r) {
  std::vector<std::int64_t> out;
  for (const auto& o : r.outliers) out.push_back(o.rank);
  return out;
}

TEST(RankSpread, RanksWithinTenPercentAreBalanced) {
  const RankReport r = compare({rank_with_peak(10 * GiB), rank_with_peak(10 * GiB + GiB / 2), rank_with_peak(10 * GiB)});
  EXPECT_EQ(r.spread, RankSpread::Balanced);
  EXPECT_TRUE(r.outliers.empty());
  EXPECT_EQ(ranks_headline(r).rfind("The 3 ranks are balanced (peak from 10.00 GiB to 10.50 GiB)", 0), 0u) << ranks_headline(r);
}

TEST(RankSpread, OneRankFarFromTheMedianStandsOut) {
  const RankReport r = compare({rank_with_peak(10 * GiB), rank_with_peak(10 * GiB), rank_with_peak(10 * GiB + GiB / 4), rank_with_peak(30 * GiB),
                                rank_with_peak(10 * GiB)});
  EXPECT_EQ(r.spread, RankSpread::Outliers);
  EXPECT_EQ(outlier_ranks(r), (std::vector<std::int64_t>{3}));
  EXPECT_EQ(r.outliers.front().reason, "peak 30.00 GiB against a median of 10.00 GiB (+20.00 GiB)");
  EXPECT_EQ(ranks_headline(r).rfind("Rank 3 of 5 stands out", 0), 0u) << ranks_headline(r);
}

TEST(RankSpread, RanksThatAllDifferAreUnevenNotBalanced) {
  // Pipeline-like: no common level, every rank more than 10% from the median.
  const RankReport r = compare({rank_with_peak(10 * GiB), rank_with_peak(20 * GiB), rank_with_peak(30 * GiB), rank_with_peak(40 * GiB)});
  EXPECT_EQ(r.spread, RankSpread::Uneven);
  EXPECT_EQ(outlier_ranks(r), (std::vector<std::int64_t>{1, 2, 3}));
  for (const auto& o : r.outliers) EXPECT_EQ(o.reference_rank, 0);
  EXPECT_EQ(r.outliers.back().reason, "peak 40.00 GiB against 10.00 GiB on rank 0 (+30.00 GiB)");
  EXPECT_EQ(ranks_headline(r).rfind("The 4 ranks differ throughout, with no common level (peak from 10.00 GiB on rank 0 to 40.00 GiB on rank 3)", 0), 0u)
      << ranks_headline(r);
}

TEST(RankSpread, TwoEqualGroupsAreUneven) {
  const RankReport r = compare({rank_with_peak(10 * GiB), rank_with_peak(10 * GiB), rank_with_peak(20 * GiB), rank_with_peak(20 * GiB)});
  EXPECT_EQ(r.spread, RankSpread::Uneven);
  EXPECT_EQ(outlier_ranks(r), (std::vector<std::int64_t>{2, 3}));
}

TEST(RankSpread, TwoRanksTwiceApartNameTheHigherOne) {
  const RankReport r = compare({rank_with_peak(20 * GiB), rank_with_peak(10 * GiB)});
  EXPECT_EQ(r.spread, RankSpread::Outliers);
  EXPECT_EQ(outlier_ranks(r), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(r.outliers.front().reference_rank, 1);
  EXPECT_EQ(r.outliers.front().reason, "peak 20.00 GiB against 10.00 GiB on rank 1 (+10.00 GiB)");
}

TEST(RankSpread, AnOomOnOneRankStandsOutEvenWhenBalanced) {
  auto oom = rank_with_peak(10 * GiB);
  oom->oom_events = 2;
  const RankReport r = compare({rank_with_peak(10 * GiB), oom, rank_with_peak(10 * GiB)});
  EXPECT_EQ(r.spread, RankSpread::Outliers);
  EXPECT_EQ(outlier_ranks(r), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(r.outliers.front().reason, "2 OOM event(s) where most ranks have none");
  EXPECT_NE(r.outliers.front().reference_rank, 1);
}

TEST(RankSpread, FilesNotFromOneJobAreWarnedAbout) {
  const RankReport r = compare({rank_with_peak(10 * GiB, 4ull * GiB, 4ull * GiB), rank_with_peak(10 * GiB, 1ull * GiB, 0)});
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_EQ(r.warnings[0].text(),
            "parameter memory differs from 1.00 GiB on rank 1 to 4.00 GiB on rank 0: pipeline stages differ like that, otherwise these files are "
            "not ranks of one job");
  EXPECT_EQ(r.warnings[1].text(), "rank(s) 0 hold gradients or optimizer state and rank(s) 1 none: training and inference snapshots mixed?");
  EXPECT_NE(ranks_headline(r).find(" Caution: the files may not be ranks of one job (parameter memory differs"), std::string::npos) << ranks_headline(r);
  const RankReport same = compare({rank_with_peak(10 * GiB, 4ull * GiB, 4ull * GiB), rank_with_peak(10 * GiB, 4ull * GiB, 4ull * GiB)});
  EXPECT_TRUE(same.warnings.empty());
}

}  // namespace rank_spread_tests
}  // namespace memsnap
