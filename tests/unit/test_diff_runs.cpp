// Two snapshots as two runs: peak against peak by kind, allocator settings that differ, the
// evidence for two processes (no segment address in common), the headline when neither side has
// stacks, and the real fp32-vs-bf16 pair of one script (skipped without the real corpus).
#include <gtest/gtest.h>

#include <filesystem>

#include "analysis/analyze.h"
#include "analysis/conclude.h"
#include "analysis/diff.h"
#include "model/load.h"
#include "test_support.h"

namespace memsnap {
namespace diff_runs_tests {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) { return fs::path(MEMSNAP_FIXTURE_DIR) / name; }

Site site(const std::string& where, std::uint64_t bytes, Category category, bool no_stack = false) {
  Site s;
  s.site = where;
  s.function = "forward";
  s.bytes = bytes;
  s.blocks = 1;
  s.category = category;
  s.no_stack = no_stack;
  return s;
}

TEST(DiffRuns, KindsComparedWithTheSiteThatMovedMost) {
  const std::vector<Site> before = {site("model.py:10", 100, Category::Parameter), site("linear.py:15", 30, Category::Activation),
                                    site("attn.py:4", 50, Category::Activation)};
  const std::vector<Site> after = {site("model.py:10", 100, Category::Parameter), site("linear.py:15", 270, Category::Activation),
                                   site("attn.py:4", 20, Category::Activation), site("[no stack recorded]", 8, Category::Unknown, true)};
  const auto kinds = kind_deltas(before, after);
  ASSERT_EQ(kinds.size(), 2u);  // parameters are equal on both sides: left out
  EXPECT_EQ(kinds[0].category, Category::Activation);
  EXPECT_EQ(kinds[0].before, 80u);
  EXPECT_EQ(kinds[0].after, 290u);
  EXPECT_EQ(kinds[0].delta, 210);
  EXPECT_EQ(kinds[0].top_site, "linear.py:15");
  EXPECT_EQ(kinds[0].top_site_delta, 240);
  EXPECT_EQ(kinds[1].category, Category::Unknown);
  EXPECT_EQ(kinds[1].delta, 8);
  EXPECT_EQ(kinds[1].top_site, "");  // stack-less memory has no site to name
}

TEST(DiffRuns, SettingsThatDifferAreListed) {
  AllocatorSettings a, b;
  a.present = b.present = true;
  a.json = R"({"expandable_segments":false,"max_split_size":-1,"roundup_power2_divisions":[1,2]})";
  b.json = R"({"expandable_segments":true,"max_split_size":-1,"garbage_collection_threshold":0.8})";
  const auto changes = setting_changes(a, b);
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[0].key, "expandable_segments");
  EXPECT_EQ(changes[0].before, "false");
  EXPECT_EQ(changes[0].after, "true");
  EXPECT_EQ(changes[1].key, "garbage_collection_threshold");
  EXPECT_EQ(changes[1].before, "");
  EXPECT_EQ(changes[2].key, "roundup_power2_divisions");
  EXPECT_EQ(changes[2].after, "");
}

TEST(DiffRuns, OneRunKeepsItsSegmentAddresses) {
  const auto early = load_snapshot((fixture("diff_growing_container") / "early.pickle").string());
  const auto late = load_snapshot((fixture("diff_growing_container") / "late.pickle").string());
  const DiffReport d = diff_snapshots(early, analyze(early), late, analyze(late));
  EXPECT_EQ(d.relation, DiffRelation::OneRun);
  ASSERT_TRUE(d.peak_before && d.peak_after);
  EXPECT_NE(diff_headline(d).find(", peak "), std::string::npos) << diff_headline(d);
}

TEST(DiffRuns, NoSegmentAddressInCommonIsTwoProcesses) {
  const auto early = load_snapshot((fixture("diff_growing_container") / "early.pickle").string());
  auto other = load_snapshot((fixture("diff_growing_container") / "early.pickle").string());
  for (Segment& s : other.snapshot.segments) s.address += 1ull << 40;  // another process's address space
  const DiffReport d = diff_snapshots(early, analyze(early), other, analyze(other));
  EXPECT_EQ(d.relation, DiffRelation::TwoRuns);
  EXPECT_EQ(d.relation_evidence,
            "no segment address is common to both, so two processes, and both traces open with the same allocation sites: one script run twice");
  EXPECT_EQ(diff_headline(d).rfind("These are two runs, not two points of one run (", 0), 0u) << diff_headline(d);
  for (const DiffSite& s : d.sites) EXPECT_EQ(s.verdict, DiffVerdict::None) << s.site;
}

TEST(DiffRuns, NoStacksOnEitherSideSaysWhyThereIsNoVerdict) {
  DiffReport d;
  d.before.allocated = 1ull << 30;
  d.after.allocated = 3ull << 30;
  DiffSite s;
  s.site = "[no stack recorded]";
  s.no_stack = true;
  s.delta_bytes = 2ll << 30;
  s.delta_blocks = 4066;
  d.sites = {s};
  d.stacks_on_neither = true;
  EXPECT_EQ(diff_headline(d),
            "Between the two snapshots live memory grew by 2.00 GiB (to 3.00 GiB) in +4066 blocks; neither snapshot recorded stacks, so the growth "
            "cannot be placed by site and no leak verdict is possible (record with _record_memory_history(stacks=\"python\") or \"all\").");
}

TEST(DiffRuns, RealFp32AndBf16RunsAreComparedPeakAgainstPeak) {
  const fs::path dir = test::corpus_dir();
  const fs::path fp32 = dir / "silmont2000_assignment2-systems_memory_forward_fp32_128.pickle";
  const fs::path bf16 = dir / "silmont2000_assignment2-systems_memory_forward_bf16_128.pickle";
  if (!fs::exists(fp32) || !fs::exists(bf16)) GTEST_SKIP() << "real corpus not found at " << dir;
  const auto a = load_snapshot(fp32.string()), b = load_snapshot(bf16.string());
  const DiffReport d = diff_snapshots(a, analyze(a), b, analyze(b));
  EXPECT_EQ(d.relation, DiffRelation::TwoRuns);
  ASSERT_TRUE(d.peak_before && d.peak_after);
  EXPECT_EQ(*d.peak_after - *d.peak_before, 222994432);  // 212.66 MiB
  ASSERT_FALSE(d.kinds.empty());
  // autocast's bf16 copies of the fp32 weights explain it (the activations shrink a little); the
  // kinds' bytes are each report's own peak budget (the bf16 report says "autocast copy 231.40 MiB").
  EXPECT_EQ(d.kinds.front().category, Category::AutocastCopy);
  EXPECT_EQ(d.kinds.front().delta, 242638848);  // 231.40 MiB
  EXPECT_NE(d.kinds.front().top_site.find("linear.py:15"), std::string::npos);
  EXPECT_NE(diff_headline(d).find("bf16_128.pickle's peak is 212.66 MiB higher than"), std::string::npos) << diff_headline(d);
  EXPECT_NE(diff_headline(d).find("autocast_copy +231.40 MiB (largest at "), std::string::npos) << diff_headline(d);
}

// Two runs of one repository, a LLaMA and then a BERT fine-tuned: the kinds are what each report's
// budget says, stack-less blocks told by their sizes (AdamW state 6.05 GiB -> 384.19 MiB), not one
// "unknown" bucket for everything allocated before the recording; and a kind whose change is almost
// all stack-less names no site (the largest site with a stack held 96 KiB of an 11.82 GiB change).
TEST(DiffRuns, RealRunsCompareTheBudgetsKinds) {
  const fs::path dir = test::corpus_dir();
  const fs::path llama = dir / "Maphsge4_select_n_snapshot_ec5be11.pickle";
  const fs::path bert = dir / "Maphsge4_select_n_snapshot.pickle";
  if (!fs::exists(llama) || !fs::exists(bert)) GTEST_SKIP() << "real corpus not found at " << dir;
  const auto a = load_snapshot(llama.string()), b = load_snapshot(bert.string());
  const DiffReport d = diff_snapshots(a, analyze(a), b, analyze(b));
  ASSERT_GE(d.kinds.size(), 5u);
  EXPECT_EQ(d.kinds[0].category, Category::OptimizerState);
  EXPECT_EQ(d.kinds[0].before, 6492784640u);  // 6.05 GiB
  EXPECT_EQ(d.kinds[0].after, 402849792u);    // 384.19 MiB
  EXPECT_EQ(d.kinds[0].top_site, "");
  EXPECT_EQ(d.kinds[1].category, Category::Activation);
  for (const KindDelta& k : d.kinds) {
    if (k.category == Category::Unknown) EXPECT_EQ(k.before, 1049267200u);  // 1000.66 MiB, as the LLaMA report's budget
  }
  EXPECT_NE(diff_headline(d).find("(2.24 GiB against 19.37 GiB): optimizer_state -5.67 GiB, activation -4.52 GiB (largest at "),
            std::string::npos)
      << diff_headline(d);
}

}  // namespace diff_runs_tests
}  // namespace memsnap
