// Parsing and checking CI budgets over the JSON report.
#include "query/budget.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/finding.h"
#include "base/error.h"
#include "base/format_bytes.h"

namespace memsnap {
namespace {

constexpr std::array<std::string_view, 6> kOps = {">=", "<=", "==", "!=", ">", "<"};
constexpr const auto& kPatternIds = EnumNames<PatternId>::names;
constexpr std::array<std::string_view, 4> kGrowthMetrics = {"peak_allocated", "peak_reserved", "reserved", "allocated"};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_metric(std::string_view name) {
  const auto& m = budget_metrics();
  return std::find(m.begin(), m.end(), name) != m.end();
}

std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

// A number, a size ("20GiB"), a percentage ("25%") or a metric.
bool parse_factor(std::string_view text, BudgetTerm& term, std::string& error) {
  text = trim(text);
  if (is_metric(text)) {
    if (!term.metric.empty()) {
      error = fmt::format("'{}' multiplies two metrics; multiply a metric by a number", text);
      return false;
    }
    term.metric = std::string(text);
    return true;
  }
  if (text.ends_with('%')) {
    if (const auto v = parse_number(text.substr(0, text.size() - 1))) {
      term.factor *= *v / 100;
      return true;
    }
  } else if (const auto v = parse_number(text)) {
    term.factor *= *v;
    return true;
  } else if (const auto size = parse_size(text)) {
    term.factor *= static_cast<double>(*size);
    return true;
  }
  error = fmt::format("'{}' is neither a number, a size (20GiB), a percentage (25%) nor a metric ({})", text,
                      fmt::join(budget_metrics(), ", "));
  return false;
}

bool parse_term(std::string_view text, BudgetTerm& term, std::string& error) {
  if (trim(text).empty()) {
    error = "a side of the comparison is empty";
    return false;
  }
  const auto star = text.find('*');
  if (star == std::string_view::npos) return parse_factor(text, term, error);
  return parse_factor(text.substr(0, star), term, error) && parse_factor(text.substr(star + 1), term, error);
}

const nlohmann::ordered_json* metric_value(const nlohmann::ordered_json& report, const std::string& metric) {
  if (metric == "ooms") return report.contains("trace") ? &report["trace"]["oom"] : nullptr;
  if (metric == "events") return report.contains("trace") ? &report["trace"]["events"] : nullptr;
  if (metric == "dropped_events") return report.contains("trace") ? &report["trace"]["dropped"] : nullptr;
  if (!report.contains("totals") || !report["totals"].contains(metric)) return nullptr;
  return &report["totals"][metric];
}

double value_of(const BudgetTerm& term, const nlohmann::ordered_json& report) {
  if (term.metric.empty()) return term.factor;
  const auto* v = metric_value(report, term.metric);
  if (!v) throw InputError(fmt::format("the report has no {}", term.metric), "check it is a memsnap.report/1 JSON report");
  if (v->is_array()) return term.factor * static_cast<double>(v->size());
  if (v->is_null()) throw InputError(fmt::format("the report has no {} (the snapshot has no trace)", term.metric),
                                     "record the trace with _record_memory_history() or budget another metric");
  return term.factor * v->get<double>();
}

bool holds(double left, const std::string& op, double right) {
  if (op == ">") return left > right;
  if (op == ">=") return left >= right;
  if (op == "<") return left < right;
  if (op == "<=") return left <= right;
  if (op == "==") return left == right;
  return left != right;
}

// "21474836480 (20.00 GiB)" for byte metrics, the count otherwise.
std::string shown(const std::string& metric, double value) {
  const bool count = metric == "segments" || metric == "blocks" || metric == "ooms" || metric == "events" || metric == "dropped_events";
  const auto whole = static_cast<std::int64_t>(std::llround(value));
  return count ? fmt::format("{}", whole) : fmt::format("{} ({})", whole, format_bytes(whole));
}

}  // namespace

const std::vector<std::string>& budget_metrics() {
  static const std::vector<std::string> kMetrics = {
      "peak_allocated", "peak_reserved", "reserved", "allocated", "pending_free", "inactive", "requested", "segments",
      "blocks", "largest_inactive_block", "ooms", "events", "dropped_events"};
  return kMetrics;
}

std::optional<Budget> parse_budget(std::string_view text, std::string& error) {
  Budget b;
  b.text = std::string(trim(text));
  const std::string_view t = b.text;
  if (t.starts_with("pattern ")) {
    b.pattern = std::string(trim(t.substr(8)));
    if (std::find(kPatternIds.begin(), kPatternIds.end(), b.pattern) == kPatternIds.end()) {
      error = fmt::format("'{}': unknown pattern; use one of {}", b.text, fmt::join(kPatternIds, ", "));
      return std::nullopt;
    }
    return b;
  }
  for (std::string_view op : kOps) {
    const auto at = t.find(op);
    if (at == std::string_view::npos) continue;
    b.op = std::string(op);
    std::string why;
    if (!parse_term(t.substr(0, at), b.left, why) || !parse_term(t.substr(at + op.size()), b.right, why)) {
      error = fmt::format("'{}': {}", b.text, why);
      return std::nullopt;
    }
    if (b.left.metric.empty() && b.right.metric.empty()) {
      error = fmt::format("'{}': compares two constants; name a metric such as peak_allocated", b.text);
      return std::nullopt;
    }
    return b;
  }
  error = fmt::format("'{}': no comparison (>, >=, <, <=, ==, !=) and not `pattern ID`", b.text);
  return std::nullopt;
}

std::optional<double> parse_growth(std::string_view text) {
  text = trim(text);
  const bool percent = text.ends_with('%');
  const auto v = parse_number(percent ? text.substr(0, text.size() - 1) : text);
  if (!v || *v < 0) return std::nullopt;
  return percent ? *v / 100 : *v;
}

std::vector<std::string> broken_budgets(const std::vector<Budget>& budgets, const nlohmann::ordered_json& report) {
  std::vector<std::string> out;
  for (const Budget& b : budgets) {
    if (!b.pattern.empty()) {
      for (const auto& p : report.value("patterns", nlohmann::ordered_json::array())) {
        if (p.value("id", "") == b.pattern) {
          out.push_back(fmt::format("{}: found ({} {}): {}", b.text, p.value("verdict", ""), p.value("confidence", ""),
                                    p.value("summary", "")));
          break;
        }
      }
      continue;
    }
    const double left = value_of(b.left, report), right = value_of(b.right, report);
    if (!holds(left, b.op, right)) continue;
    std::string line = b.text + ":";
    for (const BudgetTerm* t : {&b.left, &b.right}) {
      if (!t->metric.empty()) line += fmt::format(" {} is {};", t->metric, shown(t->metric, value_of({1, t->metric}, report)));
    }
    line.pop_back();
    out.push_back(line);
  }
  return out;
}

std::vector<std::string> growth_over(const nlohmann::json& baseline, const nlohmann::ordered_json& report, double limit) {
  if (!baseline.is_object() || baseline.value("schema", "") != "memsnap.report/1" || !baseline.contains("totals")) {
    throw InputError("not a memsnap.report/1 JSON report", "pass a report written by `memsnap PATH --format json`");
  }
  std::vector<std::string> out;
  for (std::string_view name : kGrowthMetrics) {
    const std::string metric(name);
    const auto& old_value = baseline["totals"].value(metric, nlohmann::json());
    const auto* new_value = metric_value(report, metric);
    if (!old_value.is_number() || !new_value || !new_value->is_number()) continue;
    const double before = old_value.get<double>(), after = new_value->get<double>();
    if (after <= before * (1 + limit) || after <= before) continue;
    const double grew = before > 0 ? (after - before) / before * 100 : INFINITY;
    out.push_back(fmt::format("{} grew {:.1f}% over the baseline (from {} to {}; the limit is {:g}%)", metric, grew,
                              shown(metric, before), shown(metric, after), limit * 100));
  }
  return out;
}

}  // namespace memsnap
