// The CI budget options of `memsnap PATH` (--fail-if, --baseline, --fail-if-growth): parsing,
// and the check after the report is written (exit 3 with one line per broken budget).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "query/budget.h"

namespace memsnap::cli {

inline constexpr int kExitBudget = 3;

struct BudgetArgs {
  std::vector<std::string> fail_if;
  std::string baseline;
  std::string growth;
  std::vector<Budget> budgets;  // parsed
  double growth_limit = 0;
  bool active() const { return !fail_if.empty() || !baseline.empty(); }
};

void add_budget_options(CLI::App& app, BudgetArgs& args);

// Parses the expressions; false (with the usage error printed) when one is wrong.
bool parse_budget_args(BudgetArgs& args);

// 0 when every budget holds; kExitBudget with `memsnap: budget broken: ...` lines on stderr;
// kExitInput when the baseline cannot be read.
int check_budgets(const BudgetArgs& args, const nlohmann::ordered_json& report);

}  // namespace memsnap::cli
