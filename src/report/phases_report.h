// The phases section of the reports: per device, the forward / backward / optimizer step /
// zero_grad / evaluation spans, and where the peak sits (phase, iteration) with what is live
// then by kind. Text lines (wrapped by the text report) and the JSON key "phases".
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/analyze.h"

namespace memsnap {

// Prose lines, one per device and one for the peak; empty when no device shows a phase.
std::vector<std::string> phase_text_lines(const Analysis& analysis);

// The "phases" array of the JSON report (docs/report-schema.md).
nlohmann::ordered_json phases_json(const Analysis& analysis);

}  // namespace memsnap
