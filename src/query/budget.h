// CI budgets over a memsnap.report/1 JSON report: `--fail-if EXPR` ("peak_allocated > 20GiB",
// "inactive > 0.25 * reserved", "pattern growing_container") and growth against a baseline
// report (`--baseline OLD.json --fail-if-growth 5%`).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace memsnap {

// One side of a comparison: factor * metric, or a constant (metric empty).
struct BudgetTerm {
  double factor = 1;
  std::string metric;
};

struct Budget {
  std::string text;       // as written
  std::string pattern;    // "pattern ID": broken when the report names that pattern
  BudgetTerm left, right;
  std::string op;         // > >= < <= == !=
};

// The metrics a budget can name (totals of the report, plus ooms, events, dropped_events).
const std::vector<std::string>& budget_metrics();

// Parses `text`; on failure returns nullopt and sets `error` to what is wrong, naming the problem.
std::optional<Budget> parse_budget(std::string_view text, std::string& error);

// Parses "5%" or "0.05" into a fraction; nullopt when it is neither (or negative).
std::optional<double> parse_growth(std::string_view text);

// One line per broken budget ("peak_allocated > 20GiB: peak_allocated is 21.00 GiB"); empty when
// every budget holds. Throws InputError when a metric is missing from the report.
std::vector<std::string> broken_budgets(const std::vector<Budget>& budgets, const nlohmann::ordered_json& report);

// One line per metric (peak_allocated, peak_reserved, reserved, allocated) that grew by more
// than `limit` (a fraction) over `baseline`. Throws InputError when `baseline` is not a report.
std::vector<std::string> growth_over(const nlohmann::json& baseline, const nlohmann::ordered_json& report, double limit);

}  // namespace memsnap
