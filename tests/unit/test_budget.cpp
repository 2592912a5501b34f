// CI budgets: expressions parse or fail naming the problem, hold or break on the generated
// fixtures' exact totals, growth against a baseline report, and the CLI's exit statuses.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "query/budget.h"
#include "test_support.h"

namespace memsnap {
namespace budget_tests {

std::string fixture(const std::string& name) { return std::string(MEMSNAP_FIXTURE_DIR) + "/" + name; }

nlohmann::ordered_json report_with(std::uint64_t peak, std::uint64_t reserved, std::uint64_t inactive) {
  nlohmann::ordered_json r;
  r["schema"] = "memsnap.report/1";
  r["totals"] = {{"reserved", reserved}, {"allocated", reserved - inactive}, {"inactive", inactive}, {"peak_allocated", peak},
                 {"peak_reserved", reserved}, {"segments", 4}};
  r["trace"] = {{"events", 10}, {"dropped", 0}, {"oom", nlohmann::ordered_json::array({nlohmann::ordered_json::object()})}};
  r["patterns"] = nlohmann::ordered_json::array({{{"id", "growing_container"}, {"verdict", "leak"}, {"confidence", "high"},
                                                  {"summary", "metrics.py:27 grows"}}});
  return r;
}

Budget parsed(const std::string& text) {
  std::string error;
  auto b = parse_budget(text, error);
  EXPECT_TRUE(b) << error;
  return b.value_or(Budget{});
}

std::string parse_error(const std::string& text) {
  std::string error;
  EXPECT_FALSE(parse_budget(text, error)) << text;
  return error;
}

TEST(Budget, ComparisonsHoldOrBreakAsWritten) {
  const auto r = report_with(21474836480, 32212254720, 10737418240);  // peak 20 GiB, reserved 30 GiB, inactive 10 GiB
  EXPECT_TRUE(broken_budgets({parsed("peak_allocated > 20GiB")}, r).empty());
  EXPECT_EQ(broken_budgets({parsed("peak_allocated >= 20GiB")}, r),
            std::vector<std::string>{"peak_allocated >= 20GiB: peak_allocated is 21474836480 (20.00 GiB)"});
  EXPECT_EQ(broken_budgets({parsed("inactive > 0.25 * reserved")}, r),
            std::vector<std::string>{"inactive > 0.25 * reserved: inactive is 10737418240 (10.00 GiB); reserved is 32212254720 (30.00 GiB)"});
  EXPECT_TRUE(broken_budgets({parsed("inactive > 34% * reserved")}, r).empty());
  EXPECT_EQ(broken_budgets({parsed("ooms > 0")}, r), std::vector<std::string>{"ooms > 0: ooms is 1"});
  EXPECT_EQ(broken_budgets({parsed("pattern growing_container")}, r),
            std::vector<std::string>{"pattern growing_container: found (leak high): metrics.py:27 grows"});
  EXPECT_TRUE(broken_budgets({parsed("pattern reference_cycles")}, r).empty());
}

TEST(Budget, BadExpressionsNameTheProblem) {
  EXPECT_EQ(parse_error("peak > 1GiB"), "'peak > 1GiB': 'peak' is neither a number, a size (20GiB), a percentage (25%) nor a metric "
                                        "(peak_allocated, peak_reserved, reserved, allocated, pending_free, inactive, requested, "
                                        "segments, blocks, largest_inactive_block, ooms, events, dropped_events)");
  EXPECT_EQ(parse_error("peak_allocated"), "'peak_allocated': no comparison (>, >=, <, <=, ==, !=) and not `pattern ID`");
  EXPECT_EQ(parse_error("1GiB > 2GiB"), "'1GiB > 2GiB': compares two constants; name a metric such as peak_allocated");
  EXPECT_EQ(parse_error("inactive > reserved * allocated"),
            "'inactive > reserved * allocated': 'allocated' multiplies two metrics; multiply a metric by a number");
  EXPECT_NE(parse_error("pattern leaky").find("'pattern leaky': unknown pattern; use one of fragmentation"), std::string::npos);
  EXPECT_EQ(parse_error("reserved > "), "'reserved >': a side of the comparison is empty");
}

TEST(Budget, GrowthOverTheBaseline) {
  const auto old_report = report_with(1000000000, 2000000000, 0);
  const auto same = report_with(1040000000, 2000000000, 0);  // +4%
  const auto grown = report_with(1100000000, 2000000000, 0);  // +10%
  const nlohmann::json baseline = nlohmann::json::parse(old_report.dump());
  EXPECT_TRUE(growth_over(baseline, same, 0.05).empty());
  const auto lines = growth_over(baseline, grown, 0.05);
  ASSERT_EQ(lines.size(), 1u);  // only the peak grew
  EXPECT_EQ(lines.front(),
            "peak_allocated grew 10.0% over the baseline (from 1000000000 (953.67 MiB) to 1100000000 (1.02 GiB); the limit is 5%)");
  EXPECT_EQ(parse_growth("5%"), 0.05);
  EXPECT_EQ(parse_growth("0.1"), 0.1);
  EXPECT_FALSE(parse_growth("-5%"));
  EXPECT_FALSE(parse_growth("lots"));
}

TEST(BudgetCli, ExitThreeWithOneLinePerBrokenBudget) {
  const std::string snap = fixture("growing_container.pickle");
  const test::CliRun ok = test::run_memsnap(snap + " --fail-if 'peak_allocated > 1GiB' --fail-if 'pattern reference_cycles'");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(ok.err, "");
  const test::CliRun broken = test::run_memsnap(snap + " --format json --fail-if 'peak_allocated > 80MiB' --fail-if 'pattern growing_container'");
  EXPECT_EQ(broken.status, 3);
  EXPECT_EQ(nlohmann::json::parse(broken.out)["schema"], "memsnap.report/1");  // the report is still written
  EXPECT_EQ(broken.err.substr(0, broken.err.find('\n') + 1),
            "memsnap: budget broken: peak_allocated > 80MiB: peak_allocated is 91878576 (87.62 MiB)\n");
  EXPECT_NE(broken.err.find("\nmemsnap: budget broken: pattern growing_container: found (leak high): "), std::string::npos) << broken.err;
  const test::CliRun bad = test::run_memsnap(snap + " --fail-if 'peak_allocated >> 1MiB'");
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(test::run_memsnap(snap + " --fail-if-growth 5%").status, 2);
}

TEST(BudgetCli, GrowthAgainstAStoredReport) {
  const std::string snap = fixture("growing_container.pickle");
  const auto base = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_baseline.json");
  ASSERT_EQ(test::run_memsnap(snap + " --format json -o " + base.string()).status, 0);
  EXPECT_EQ(test::run_memsnap(snap + " --baseline " + base.string() + " --fail-if-growth 5%").status, 0);
  // An earlier run that peaked 10% lower.
  std::ifstream in(base);
  auto j = nlohmann::json::parse(in);
  in.close();
  j["totals"]["peak_allocated"] = 91878576 * 10 / 11;
  std::ofstream(base) << j.dump();
  const test::CliRun grown = test::run_memsnap(snap + " --baseline " + base.string() + " --fail-if-growth 5%");
  EXPECT_EQ(grown.status, 3);
  EXPECT_EQ(grown.err,
            "memsnap: budget broken: peak_allocated grew 10.0% over the baseline (from 83525978 (79.66 MiB) to 91878576 "
            "(87.62 MiB); the limit is 5%)\n");
  std::ofstream(base) << "{\"schema\": \"other\"}";
  const test::CliRun wrong = test::run_memsnap(snap + " --baseline " + base.string());
  EXPECT_EQ(wrong.status, 1);
  EXPECT_EQ(wrong.err, "memsnap: error: " + base.string() + ": not a memsnap.report/1 JSON report; pass a report written by "
                                                             "`memsnap PATH --format json`\n");
  std::filesystem::remove(base);
}

}  // namespace budget_tests
}  // namespace memsnap
