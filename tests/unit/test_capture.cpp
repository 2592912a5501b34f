// `memsnap capture` recipes run as written: each is executed by Python against a stand-in torch
// with PyTorch 2.x's signatures (tests/data/capture), so a wrong argument name fails, and the
// calls it makes (stacks, max_entries, the file names per rank, one dump per OOM) are exact.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.h"

namespace memsnap {
namespace capture_tests {

namespace fs = std::filesystem;

const std::string kHarness = std::string(MEMSNAP_DATA_DIR) + "/capture/run_recipe.py";
const std::string kStop = "_record_memory_history enabled=None stacks=all max_entries=9223372036854775807\n";
const std::string kStart = "_record_memory_history enabled=all stacks=python max_entries=100000\n";

// The recipe `memsnap capture FLAGS` printed, run in `dir` with `env` and harness `options`.
test::CliRun run_recipe(const std::string& flags, const test::TempDir& dir, const std::string& env = "",
                        const std::string& options = "") {
  return test::run_memsnap("capture " + flags + " | " + env + " python3 '" + kHarness + "' " + options, dir.path.string());
}

TEST(Capture, MinimalRecipeRecordsPythonStacksAndDumps) {
  test::TempDir dir("capture_minimal");
  const test::CliRun r = run_recipe("", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, kStart + "_dump_snapshot filename=memory_snapshot.pickle\n" + kStop + "steps run 0\n");
  EXPECT_TRUE(fs::is_regular_file(dir.path / "memory_snapshot.pickle"));
}

TEST(Capture, RecipesSayWhatStacksAndMaxEntriesCost) {
  for (const char* flags : {"", "--oom", "--diff", "--distributed"}) {
    const test::CliRun r = test::run_memsnap(std::string("capture ") + flags);
    ASSERT_EQ(r.status, 0) << flags;
    EXPECT_NE(r.out.find("one 1M-entry dump took 461 s with them instead of 4 s"), std::string::npos) << flags;
    EXPECT_NE(r.out.find("events per step x steps"), std::string::npos) << flags;
  }
}

TEST(Capture, OomRecipeDumpsOnceAtTheFirstFailure) {
  test::TempDir dir("capture_oom");
  const test::CliRun r = run_recipe("--oom", dir, "", "--oom");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "raised OutOfMemoryError\n" + kStart + "_cuda_attach_out_of_memory_observer\n"
                   "_dump_snapshot filename=oom_snapshot_dev0.pickle\nsteps run 0\n");
  EXPECT_TRUE(fs::is_regular_file(dir.path / "oom_snapshot_dev0.pickle"));
}

TEST(Capture, DiffRecipeDumpsStepsOneAndOneHundredOne) {
  test::TempDir dir("capture_diff");
  const test::CliRun r = run_recipe("--diff", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, kStart + "_dump_snapshot filename=step1.pickle\n_dump_snapshot filename=step101.pickle\n" + kStop +
                       "steps run 102\n");
}

TEST(Capture, DistributedRecipeNamesEachRanksSnapshot) {
  test::TempDir dir("capture_ranks");
  const test::CliRun r = run_recipe("--distributed", dir, "RANK=3 LOCAL_RANK=1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "set_device device=1\ninit_process_group backend=nccl\n" + kStart + "_cuda_attach_out_of_memory_observer\n"
                   "_dump_snapshot filename=snapshots/rank3.pickle\n" + kStop + "steps run 21\n");
  EXPECT_TRUE(fs::is_regular_file(dir.path / "snapshots/rank3.pickle"));
  // The OOM dumps go to a subfolder, which `memsnap DIR` does not read as a rank.
  EXPECT_TRUE(fs::is_directory(dir.path / "snapshots/oom"));
}

TEST(Capture, DistributedRecipeDumpsTheFailingRankOnce) {
  test::TempDir dir("capture_ranks_oom");
  const test::CliRun r = run_recipe("--distributed", dir, "RANK=5 MEMSNAP_DIR=shared", "--oom");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "raised OutOfMemoryError\nset_device device=0\ninit_process_group backend=nccl\n" + kStart +
                       "_cuda_attach_out_of_memory_observer\n_dump_snapshot filename=shared/oom/rank5.pickle\nsteps run 4\n");
  EXPECT_TRUE(fs::is_regular_file(dir.path / "shared/oom/rank5.pickle"));
  EXPECT_FALSE(fs::exists(dir.path / "shared/rank5.pickle"));
}

}  // namespace capture_tests
}  // namespace memsnap
