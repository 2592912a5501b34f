// The JSON report (schema memsnap.report/1, see docs/report-schema.md).
#pragma once

#include <nlohmann/json.hpp>

#include "analysis/analyze.h"
#include "report/report_input.h"

namespace memsnap {

inline constexpr const char* kReportSchema = "memsnap.report/1";

nlohmann::ordered_json totals_json(const Totals& t);
nlohmann::ordered_json json_report(const LoadedSnapshot& loaded, const Analysis& analysis);
// The report with the "diff" or the "ranks" sections when the input has them.
nlohmann::ordered_json json_report(const ReportInput& input);

// Rewrites the findings of a report (headline, patterns, next_steps, uncertainties) from `analysis`.
void set_findings_json(nlohmann::ordered_json& report, const Analysis& analysis);

}  // namespace memsnap
