// Two runs of one program from two clones: the directory change that pairs their files, what it
// leaves alone, and a diff that pairs the sites instead of calling them new and removed.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "analysis/checkout_roots.h"
#include "analysis/conclude.h"
#include "analysis/diff.h"
#include "model/load.h"
#include "test_support.h"

namespace memsnap {
namespace checkout_roots_tests {

Site site(const std::string& file, std::int64_t line, const std::string& function, std::uint64_t bytes) {
  Site s;
  s.file = file;
  s.line = line;
  s.site = file + ":" + std::to_string(line);
  s.function = function;
  s.bytes = bytes;
  s.blocks = 1;
  s.category = Category::Parameter;
  return s;
}

TEST(CheckoutRoots, FilesEndingInTheSameDirectoryAndLinePairTheTwoClones) {
  const std::vector<Site> before = {site("/home/u/FlexGen/flexgen/pytorch_backend.py", 195, "allocate", 100),
                                    site("/home/u/FlexGen/flexgen/flex_opt.py", 40, "init_weight", 10)};
  const std::vector<Site> after = {site("/home/u/origin_git_Flex/flexgen/pytorch_backend.py", 195, "allocate", 700),
                                   site("/home/u/origin_git_Flex/flexgen/flex_opt.py", 40, "init_weight", 10)};
  const auto roots = checkout_roots(before, after);
  ASSERT_EQ(roots.size(), 1u);
  EXPECT_EQ(roots[0].before, "/home/u/FlexGen/");
  EXPECT_EQ(roots[0].after, "/home/u/origin_git_Flex/");
  EXPECT_EQ(roots[0].files, 2u);
  const auto moved = rebased(before, roots);
  EXPECT_EQ(moved[0].site, "/home/u/origin_git_Flex/flexgen/pytorch_backend.py:195");
  EXPECT_EQ(moved[0].file, "/home/u/origin_git_Flex/flexgen/pytorch_backend.py");
  const auto sites = diff_sites(moved, after);
  ASSERT_EQ(sites.size(), 2u);
  EXPECT_EQ(sites[0].site, "/home/u/origin_git_Flex/flexgen/pytorch_backend.py:195");
  EXPECT_EQ(sites[0].status, DiffStatus::Grown);
  EXPECT_EQ(sites[0].delta_bytes, 600);
  EXPECT_EQ(sites[1].status, DiffStatus::Same);
}

TEST(CheckoutRoots, AFileNameAloneOrAnotherLineDoesNotPair) {
  // Only the name in common (train.py in two projects), or the same path tail with no line and
  // function in common: no evidence of one program.
  const std::vector<Site> before = {site("/a/train.py", 10, "main", 1), site("/a/pkg/model.py", 5, "forward", 1)};
  const std::vector<Site> after = {site("/b/train.py", 10, "main", 1), site("/b/pkg/model.py", 6, "forward", 1)};
  EXPECT_TRUE(checkout_roots(before, after).empty());
}

TEST(CheckoutRoots, AFileOnBothSidesAsItIsNeedsNoChange) {
  const std::vector<Site> before = {site("/a/pkg/model.py", 5, "forward", 1)};
  const std::vector<Site> after = {site("/a/pkg/model.py", 5, "forward", 2)};
  EXPECT_TRUE(checkout_roots(before, after).empty());
}

// Two runs are compared peak against peak: a file live only at the peaks (the activations) pairs
// the clones too.
TEST(CheckoutRoots, FilesLiveOnlyAtThePeaksPairTheClones) {
  const std::vector<Site> before_end = {site("/a/proj/train.py", 3, "main", 1)};
  const std::vector<Site> after_end = {site("/b/proj/eval.py", 9, "main", 1)};
  const std::vector<Site> before_peak = {site("/a/proj/model/attn.py", 40, "forward", 8)};
  const std::vector<Site> after_peak = {site("/b/proj/model/attn.py", 40, "forward", 16)};
  EXPECT_TRUE(checkout_roots(before_end, after_end).empty());
  const auto roots = checkout_roots({&before_end, &before_peak}, {&after_end, &after_peak});
  ASSERT_EQ(roots.size(), 1u);
  EXPECT_EQ(roots[0].before, "/a/");
  EXPECT_EQ(roots[0].after, "/b/");
  EXPECT_EQ(roots[0].files, 1u);
}

TEST(CheckoutRoots, TheUsersCloneAndALibrarysInstallAreTwoChanges) {
  const std::vector<Site> before = {site("/home/u/proj/src/train.py", 30, "step", 1), site("/home/u/proj/src/model.py", 8, "forward", 1),
                                    site("/usr/lib/python3/site-packages/transformers/models/llama/modeling_llama.py", 400, "forward", 1)};
  const std::vector<Site> after = {site("/work/proj/src/train.py", 30, "step", 1), site("/work/proj/src/model.py", 8, "forward", 1),
                                   site("/opt/conda/lib/site-packages/transformers/models/llama/modeling_llama.py", 400, "forward", 1)};
  const auto roots = checkout_roots(before, after);
  ASSERT_EQ(roots.size(), 2u);
  EXPECT_EQ(roots[0].before, "/home/u/");  // two files: first; the longest tail they share is proj/src/...
  EXPECT_EQ(roots[0].after, "/work/");
  EXPECT_EQ(roots[0].files, 2u);
  EXPECT_EQ(roots[1].before, "/usr/lib/python3/");
  EXPECT_EQ(roots[1].after, "/opt/conda/lib/");
  const auto moved = rebased(before, roots);
  EXPECT_EQ(moved[2].file, "/opt/conda/lib/site-packages/transformers/models/llama/modeling_llama.py");
}

// Two FlexGen runs from two clones of the repository (/home/dingyiran/FlexGen and
// /home/dingyiran/origin_git_Flex): the weights' line, pytorch_backend.py:195, grew from 763.83 MiB
// to 5.29 GiB. Matched by path, it was one site removed and another new, and the kind's change
// (+4.54 GiB) named a site that changed more (+5.29 GiB).
TEST(CheckoutRoots, RealRunsFromTwoClonesPairTheirSites) {
  const std::filesystem::path dir = test::corpus_dir();
  const auto earlier = dir / "Yiyi-philosophy_LLM-inference_1.3b_snapshot.pickle";
  const auto later = dir / "Yiyi-philosophy_LLM-inference_1.3b_snapshot_4bf3cd4.pickle";
  if (!std::filesystem::exists(earlier) || !std::filesystem::exists(later)) GTEST_SKIP() << "real corpus not found at " << dir;
  const auto a = load_snapshot(earlier.string()), b = load_snapshot(later.string());
  const DiffReport d = diff_snapshots(a, analyze(a), b, analyze(b));
  ASSERT_EQ(d.roots.size(), 1u);
  EXPECT_EQ(d.roots[0].before, "/home/dingyiran/FlexGen/");
  EXPECT_EQ(d.roots[0].after, "/home/dingyiran/origin_git_Flex/");
  ASSERT_FALSE(d.sites.empty());
  EXPECT_EQ(d.sites[0].site, "/home/dingyiran/origin_git_Flex/flexgen/pytorch_backend.py:195");
  EXPECT_EQ(d.sites[0].status, DiffStatus::Grown);
  EXPECT_EQ(d.sites[0].bytes_before, 800931840u);  // 763.83 MiB
  ASSERT_FALSE(d.kinds.empty());
  EXPECT_EQ(d.kinds[0].category, Category::Parameter);
  EXPECT_EQ(d.kinds[0].top_site, d.sites[0].site);
  EXPECT_LE(d.kinds[0].top_site_delta, d.kinds[0].delta);  // at the peaks
  for (const std::string& w : d.warnings) EXPECT_EQ(w.find("no allocation site is common"), std::string::npos) << w;

  const test::CliRun text = test::run_memsnap(earlier.string() + " --diff " + later.string());
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("files under /home/dingyiran/FlexGen/ in the earlier are matched with the same\n    files under "
                          "/home/dingyiran/origin_git_Flex/ in the later (1 file)"),
            std::string::npos)
      << text.out;
  const test::CliRun json = test::run_memsnap(earlier.string() + " --diff " + later.string() + " --format json");
  ASSERT_EQ(json.status, 0) << json.err;
  const auto roots = nlohmann::json::parse(json.out)["diff"]["checkout_roots"];
  ASSERT_EQ(roots.size(), 1u);
  EXPECT_EQ(roots[0]["before"], "/home/dingyiran/FlexGen/");
  EXPECT_EQ(roots[0]["after"], "/home/dingyiran/origin_git_Flex/");
  EXPECT_EQ(roots[0]["files"], 1);
}

}  // namespace checkout_roots_tests
}  // namespace memsnap
