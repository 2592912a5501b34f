// Hostile command lines and outputs: symlink loops and long names, out-of-range counts and sizes,
// full disks, closed pipes, file-size limits, and an -o that names the input.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "report/json_writer.h"
#include "test_support.h"

namespace memsnap {
namespace hostile_cli_tests {

namespace fs = std::filesystem;

using test::TempDir;

std::string example() { return std::string(MEMSNAP_DATA_DIR) + "/example.pickle"; }

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(HostileCli, SymlinkLoopWithDiffIsAnInputError) {
  TempDir dir("loop");
  fs::create_symlink("loop", dir.path / "loop");
  const test::CliRun r = test::run_memsnap("loop --diff " + example(), dir.path.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "memsnap: error: loop: cannot open the file (Too many levels of symbolic links); check the path\n");
}

TEST(HostileCli, OverlongNameWithDiffIsAnInputError) {
  const std::string name(300, 'a');
  const test::CliRun r = test::run_memsnap(name + " --diff " + example());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "memsnap: error: " + name + ": cannot open the file (File name too long); check the path\n");
}

TEST(HostileCli, CountsOutOfRangeAreUsageErrors) {
  for (const std::string bad : {"-1", "99999999999999999999", "9223372036854775808", "1e6", "", "12abc"}) {
    const test::CliRun r = test::run_memsnap(example() + " --max-trace-events '" + bad + "'");
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_EQ(r.err, "memsnap: error: --max-trace-events " + bad +
                         ": not a count; use a whole number from 0 to 9223372036854775807\n") << bad;
    EXPECT_EQ(test::run_memsnap("dump " + example() + " --what blocks --max-trace-events '" + bad + "'").status, 2) << bad;
  }
  EXPECT_EQ(test::run_memsnap(example() + " --max-trace-events 9223372036854775807").status, 0);
}

TEST(HostileCli, DeviceUsedBeyondEightEiBIsAUsageError) {
  for (const std::string bad : {"10000000000000000000", "9223372036854775808", "9300000000000000000", "20000000TiB"}) {
    const test::CliRun r = test::run_memsnap(example() + " --device-used " + bad);
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_EQ(r.err, "memsnap: error: --device-used " + bad +
                         ": not a size below 8 EiB; use bytes or a unit such as 81920MiB or 80GiB\n") << bad;
  }
  EXPECT_EQ(test::run_memsnap(example() + " --device-used 9000000000000000000").status, 0);
}

TEST(HostileCli, FullDiskFailsEveryCommand) {
  const std::string full = "memsnap: error: standard output: cannot write the output (No space left on device); "
                           "free space or redirect it elsewhere\n";
  for (const std::string& args : std::vector<std::string>{example(), example() + " --format json", example() + " --format html",
                                                          "dump " + example() + " --what trace", "capture --oom"}) {
    const test::CliRun r = test::run_memsnap(args + " >/dev/full");
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_EQ(r.err, full) << args;
  }
}

TEST(HostileCli, ClosedPipeIsQuiet) {
  for (const std::string& args : std::vector<std::string>{example(), "dump " + example() + " --what trace"}) {
    const test::CliRun r = test::run_memsnap(args + " | head -c 10");
    EXPECT_EQ(r.out.size(), 10u) << args;
    EXPECT_EQ(r.err, "") << args;
  }
}

TEST(HostileCli, FileSizeLimitKeepsTheOldReportWhole) {
  TempDir dir("fsize");
  const std::string out = dir / "report.html";
  std::ofstream(out) << "the old report\n";
  // ulimit -f counts 1 KiB blocks: the HTML report (hundreds of KiB) cannot be written.
  const test::CliRun limited = test::run_memsnap("capture >/dev/null; ulimit -f 8; " + std::string(MEMSNAP_BINARY) + " " +
                                                 example() + " --format html -o " + out);
  EXPECT_EQ(limited.status, 1);
  EXPECT_EQ(limited.err, "memsnap: error: " + out +
                             ": cannot write the report (File too large); check the directory exists, is writable and has space\n");
  EXPECT_EQ(file_text(out), "the old report\n");
  for (const auto& entry : fs::directory_iterator(dir.path)) EXPECT_EQ(entry.path().filename(), "report.html");
}

// -o naming a pipe or a device (/dev/null, /dev/stdout) writes into it: the atomic replace of a
// file must not put a regular file where the device node was.
TEST(HostileCli, OutputToAPipeWritesIntoThePipeAndKeepsIt) {
  TempDir dir("fifo");
  const std::string fifo = dir / "report.fifo";
  const std::string got = dir / "got.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const test::CliRun r = test::run_memsnap("capture >/dev/null; timeout 20 cat " + fifo + " > " + got + " & " +
                                           std::string(MEMSNAP_BINARY) + " " + example() + " --format json -o " + fifo +
                                           "; status=$?; wait; exit $status");
  EXPECT_EQ(r.status, 0) << r.err;
  struct stat st{};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_NE(file_text(got).find("\"schema\": \"memsnap.report/1\""), std::string::npos) << file_text(got).substr(0, 200);
}

TEST(HostileCli, OutputFileIsReplacedWholeWithTheUsualMode) {
  TempDir dir("atomic");
  const std::string out = dir / "report.txt";
  std::ofstream(out) << std::string(100000, 'x');
  const test::CliRun r = test::run_memsnap(example() + " -o " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(file_text(out), test::run_memsnap(example()).out);
  const auto perms = fs::status(out).permissions();
  EXPECT_NE(perms & fs::perms::owner_read, fs::perms::none);
  EXPECT_NE(perms & fs::perms::group_read, fs::perms::none);  // not mkstemp's 0600
}

TEST(HostileCli, OutputThatIsTheInputIsRefused) {
  TempDir dir("same");
  const std::string snap = dir / "s.pickle";
  fs::copy_file(example(), snap);
  const auto before = file_text(snap);
  const test::CliRun r = test::run_memsnap("s.pickle -o ./s.pickle", dir.path.string());
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "memsnap: error: -o ./s.pickle is the input s.pickle; writing the report there would replace the "
                   "snapshot, choose another file\n");
  fs::create_hard_link(snap, dir / "link.pickle");
  EXPECT_EQ(test::run_memsnap(example() + " --diff s.pickle -o link.pickle", dir.path.string()).status, 2);
  EXPECT_EQ(file_text(snap), before);
}

}  // namespace hostile_cli_tests
}  // namespace memsnap

namespace memsnap {
namespace hostile_cli_tests {

std::string hostile(const std::string& name) { return std::string(MEMSNAP_DATA_DIR) + "/hostile/" + name; }

bool is_valid_utf8(const std::string& s) { return valid_utf8(s) == s; }

TEST(HostileEncoding, BadUtf8InFrameNamesGivesValidJsonAndText) {
  for (const std::string name : {"bad_utf8_frames.pickle", "invalid_utf8_frames.pickle"}) {
    const test::CliRun json = test::run_memsnap(hostile(name) + " --format json");
    ASSERT_EQ(json.status, 0) << json.err;
    const auto j = nlohmann::json::parse(json.out);  // throws on invalid UTF-8
    EXPECT_EQ(j["top_sites"][0]["file"], "/w/\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDlone.py") << name;
    const test::CliRun text = test::run_memsnap(hostile(name));
    ASSERT_EQ(text.status, 0) << text.err;
    EXPECT_TRUE(is_valid_utf8(text.out)) << name;
    EXPECT_NE(text.out.find("\xEF\xBF\xBDlone.py"), std::string::npos) << name;
  }
}

TEST(HostileEncoding, JsonWithAByteOrderMarkIsRead) {
  const test::CliRun r = test::run_memsnap(hostile("bom.json") + " --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["input"]["format"], "json");
  EXPECT_EQ(nlohmann::json::parse(r.out)["totals"]["segments"], 3);
}

TEST(HostileEncoding, IntWiderThan64BitsIsNamedTooLarge) {
  const test::CliRun r = test::run_memsnap(hostile("wide_int.pickle"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "memsnap: error: " + hostile("wide_int.pickle") +
                       ": a segment's total_size is an int wider than 64 bits, too large for any size, address or time; "
                       "re-capture it with torch.cuda.memory._dump_snapshot() (run `memsnap capture`) and check the copy is complete\n");
}

nlohmann::json invariants_of(const std::string& name, const std::string& extra = "") {
  const test::CliRun r = test::run_memsnap(hostile(name) + extra + " --format json");
  EXPECT_EQ(r.status, 0) << r.err;
  return nlohmann::json::parse(r.out)["invariants"];
}

TEST(HostileOverflow, AbsurdSizesAndTimesAreInconsistencies) {
  const auto sizes = invariants_of("huge_sizes.pickle");
  EXPECT_EQ(sizes["ok"], false);
  EXPECT_EQ(sizes["violations"], nlohmann::json::array({"device 0 trace event 0 has size 6917529027641081856 B, beyond any "
                                                        "device (more than 1 PiB); the timeline and peak are meaningless"}));
  const auto segments = invariants_of("huge_segments.pickle");
  EXPECT_EQ(segments["ok"], false);
  EXPECT_EQ(segments["violations"][1], "device 0: its segments add up to more than 1 PiB; the totals are meaningless");
  const auto times = invariants_of("huge_times.pickle");
  EXPECT_EQ(times["violations"][0], "device 0 trace event 0 has time_us -9223372036854775798, not a time since the epoch");
  // The same through --diff and the text report's uncertainties.
  EXPECT_EQ(invariants_of("huge_sizes.pickle", " --diff " + hostile("huge_segments.pickle"))["ok"], false);
  EXPECT_NE(test::run_memsnap(hostile("huge_sizes.pickle")).out.find("inconsistent snapshot: device 0 trace event 0 has size"),
            std::string::npos);
}

TEST(HostileHangs, SettingsThatHoldThemselvesAreCutAtTheBudget) {
  const test::CliRun r = test::run_memsnap("dump " + hostile("self_referencing_settings.pickle") + " --what settings");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["a"]["a"].is_object());
  EXPECT_NE(r.out.find("\"<truncated>\""), std::string::npos);
  EXPECT_LT(r.out.size(), 200000u);
  EXPECT_EQ(test::run_memsnap(hostile("self_referencing_settings.pickle") + " --format json").status, 0);
}

}  // namespace hostile_cli_tests
}  // namespace memsnap
