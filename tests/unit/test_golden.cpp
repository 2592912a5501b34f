// Golden outputs: the text and JSON reports of a few generated fixtures, byte for byte.
// After an intended change of the reports, regenerate them with
//   MEMSNAP_UPDATE_GOLDEN=1 ctest -R Golden
// and review the diff of tests/golden/ like any other change.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "test_support.h"

namespace memsnap {
namespace golden_tests {

const char* const kGoldenCases[] = {"example", "oom_fragmentation", "pending_frees", "no_history", "growing_container"};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void check_golden(const std::string& name, const std::string& args, const std::string& ext) {
  const test::CliRun r = test::run_memsnap(name + ".pickle " + args, MEMSNAP_FIXTURE_DIR);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::filesystem::path golden = std::filesystem::path(MEMSNAP_GOLDEN_DIR) / (name + ext);
  if (std::getenv("MEMSNAP_UPDATE_GOLDEN")) {
    std::ofstream(golden, std::ios::binary) << r.out;
    GTEST_SKIP() << "rewrote " << golden;
  }
  ASSERT_TRUE(std::filesystem::exists(golden)) << golden << " is missing; run with MEMSNAP_UPDATE_GOLDEN=1";
  EXPECT_EQ(r.out, slurp(golden)) << "report of " << name << " differs from " << golden;
}

TEST(Golden, TextReports) {
  for (const char* name : kGoldenCases) check_golden(name, "", ".txt");
}

TEST(Golden, JsonReports) {
  for (const char* name : kGoldenCases) check_golden(name, "--format json", ".json");
}

}  // namespace golden_tests
}  // namespace memsnap
