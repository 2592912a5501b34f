// --fail-if / --baseline / --fail-if-growth for CI pipelines.
#include "cli/budget_options.h"

#include <cstdio>
#include <fstream>

#include "base/error.h"
#include "cli/cli_output.h"

namespace memsnap::cli {

void add_budget_options(CLI::App& app, BudgetArgs& a) {
  app.add_option("--fail-if", a.fail_if,
                 "exit 3 when EXPR holds, e.g. 'peak_allocated > 20GiB', 'inactive > 0.25 * reserved', 'pattern growing_container' (repeatable)");
  app.add_option("--baseline", a.baseline, "a JSON report of an earlier run (memsnap PATH --format json) to compare with");
  app.add_option("--fail-if-growth", a.growth, "with --baseline: exit 3 when a peak, reserved or allocated grew by more than this, e.g. 5%");
}

bool parse_budget_args(BudgetArgs& a) {
  for (const std::string& text : a.fail_if) {
    std::string error;
    auto budget = parse_budget(text, error);
    if (!budget) {
      std::fprintf(stderr, "memsnap: error: --fail-if %s\n", error.c_str());
      return false;
    }
    a.budgets.push_back(std::move(*budget));
  }
  if (!a.growth.empty() && a.baseline.empty()) {
    std::fprintf(stderr, "memsnap: error: --fail-if-growth needs --baseline OLD.json, the report to compare with\n");
    return false;
  }
  if (!a.baseline.empty()) {
    const auto limit = parse_growth(a.growth.empty() ? "0%" : a.growth);
    if (!limit) {
      std::fprintf(stderr, "memsnap: error: --fail-if-growth %s: not a growth; use a percentage such as 5%%\n", a.growth.c_str());
      return false;
    }
    a.growth_limit = *limit;
  }
  return true;
}

int check_budgets(const BudgetArgs& a, const nlohmann::ordered_json& report) {
  std::vector<std::string> broken = broken_budgets(a.budgets, report);
  if (!a.baseline.empty()) {
    std::ifstream in(a.baseline, std::ios::binary);
    if (!in) return input_error(a.baseline, "cannot open the baseline report; check the path");
    const auto baseline = nlohmann::json::parse(in, nullptr, false);
    if (baseline.is_discarded()) return input_error(a.baseline, "not JSON; pass a report written by `memsnap PATH --format json`");
    try {
      for (auto& line : growth_over(baseline, report, a.growth_limit)) broken.push_back(std::move(line));
    } catch (const InputError& e) {
      return input_error(a.baseline, e.what());
    }
  }
  for (const std::string& line : broken) std::fprintf(stderr, "memsnap: budget broken: %s\n", line.c_str());
  return broken.empty() ? 0 : kExitBudget;
}

}  // namespace memsnap::cli
