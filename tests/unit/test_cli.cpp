// The memsnap binary end to end: exit statuses, the one-line error format, JSON and dump output.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "test_support.h"

namespace memsnap {
namespace cli_tests {

std::string write_temp(const std::string& name, const std::vector<std::uint8_t>& bytes) {
  const auto path = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

TEST(Cli, JsonReportHasContractTotals) {
  // Named .json although it is a pickle: the format comes from the content.
  const auto path = write_temp("vector.json", test::from_hex(test::kSpecVectorHex));
  const test::CliRun r = test::run_memsnap(path + " --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "memsnap.report/1");
  EXPECT_EQ(j["input"]["format"], "pickle");
  EXPECT_EQ(j["input"]["compression"], nullptr);
  EXPECT_EQ(j["input"]["bytes"], 649);
  EXPECT_EQ(j["totals"]["reserved"], 20971520);
  EXPECT_EQ(j["totals"]["allocated"], 3145728);
  EXPECT_EQ(j["totals"]["pending_free"], 0);
  EXPECT_EQ(j["totals"]["inactive"], 17825792);
  EXPECT_EQ(j["totals"]["requested"], 3000000);
  EXPECT_EQ(j["totals"]["segments"], 1);
  EXPECT_EQ(j["totals"]["blocks"], 2);
  EXPECT_EQ(j["totals"]["largest_inactive_block"], 17825792);
  EXPECT_EQ(j["totals"]["peak_allocated"], 3000000);
  EXPECT_EQ(j["trace"]["actions"]["alloc"], 1);
  std::filesystem::remove(path);
}

TEST(Cli, ErrorsAreOneLineWithExitOne) {
  const auto png = write_temp("shot.png", {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'});
  const test::CliRun r = test::run_memsnap(png);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "memsnap: error: " + png +
                       ": this is an image (a memory_viz screenshot?), not a memory snapshot; memsnap needs the snapshot "
                       "file itself: call torch.cuda.memory._dump_snapshot(\"snap.pickle\") in your run (`memsnap "
                       "capture` prints the recipe)\n");
  EXPECT_TRUE(r.out.empty());
  std::filesystem::remove(png);
  const test::CliRun missing = test::run_memsnap("/nonexistent/snap.pickle");
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.err, "memsnap: error: /nonexistent/snap.pickle: cannot open the file (No such file or directory); check the path\n");
  const auto evil = write_temp("evil.pickle", {0x80, 0x04, 'c', 'o', 's', '\n', 's', 'y', 's', 't', 'e', 'm', '\n', '.'});
  const test::CliRun e = test::run_memsnap(evil);
  EXPECT_EQ(e.status, 1);
  EXPECT_NE(e.err.find("refusing pickle opcode GLOBAL at byte 2"), std::string::npos);
  std::filesystem::remove(evil);
}

TEST(Cli, EndlessStreamsAreTurnedAwayAtOnce) {
  // A character device is read as a stream; its first bytes decide, before memory fills up.
  const test::CliRun r = test::run_memsnap("/dev/zero");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("/dev/zero: unrecognized content (first byte 0x00): neither a pickle nor JSON"), std::string::npos) << r.err;
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(test::run_memsnap("--format xml x").status, 2);
  EXPECT_EQ(test::run_memsnap("dump x --what nothing").status, 2);
  const test::CliRun none = test::run_memsnap("");
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("memsnap needs a snapshot"), std::string::npos);
  EXPECT_NE(none.err.find("_record_memory_history"), std::string::npos);
  EXPECT_EQ(test::run_memsnap("x --device-used lots").status, 2);
}

TEST(Cli, DumpWritesJsonLines) {
  const auto path = write_temp("vector.pickle", test::from_hex(test::kSpecVectorHex));
  const test::CliRun blocks = test::run_memsnap("dump " + path + " --what blocks");
  ASSERT_EQ(blocks.status, 0) << blocks.err;
  EXPECT_EQ(blocks.out,
            "{\"device\":0,\"segment\":0,\"address\":139637976727552,\"size\":3145728,\"requested_size\":3000000,"
            "\"state\":\"active_allocated\",\"stack\":1,\"frames\":[{\"filename\":\"/w/train.py\",\"line\":7,\"name\":\"main\"}]}\n"
            "{\"device\":0,\"segment\":0,\"address\":139637979873280,\"size\":17825792,\"requested_size\":0,"
            "\"state\":\"inactive\",\"stack\":0,\"frames\":[]}\n");
  const test::CliRun trace = test::run_memsnap("dump " + path + " --what trace");
  EXPECT_EQ(trace.out, "{\"device\":0,\"index\":0,\"action\":\"alloc\",\"addr\":139637976727552,\"size\":3000000,\"stream\":0,\"time_us\":1713558427168556,\"stack\":1}\n");
  const test::CliRun settings = test::run_memsnap("dump " + path + " --what settings");
  EXPECT_EQ(settings.out, "{\"max_split_size\":-1,\"garbage_collection_threshold\":0.0}\n");
  const test::CliRun frames = test::run_memsnap("dump " + path + " --what frames");
  EXPECT_EQ(frames.out, "{\"stack\":1,\"frames\":[{\"filename\":\"/w/train.py\",\"line\":7,\"name\":\"main\"}]}\n");
  const test::CliRun segments = test::run_memsnap("dump " + path + " --what segments");
  for (const char* key : {"\"total_size\":20971520", "\"segment_type\":\"large\"", "\"blocks\":2"}) {
    EXPECT_NE(segments.out.find(key), std::string::npos) << key;
  }
  std::filesystem::remove(path);
}

TEST(Cli, CaptureRecipes) {
  const test::CliRun oom = test::run_memsnap("capture --oom");
  EXPECT_EQ(oom.status, 0);
  EXPECT_NE(oom.out.find("torch._C._cuda_attach_out_of_memory_observer(dump_on_oom)"), std::string::npos);
  const test::CliRun diff = test::run_memsnap("capture --diff");
  EXPECT_NE(diff.out.find("memsnap step1.pickle --diff step101.pickle"), std::string::npos);
}

}  // namespace cli_tests
}  // namespace memsnap
