// The human-readable report for an 80-column terminal.
#pragma once

#include <string>

#include "report/report_input.h"

namespace memsnap {

// The body, with the rank comparison or the diff after the headline when the run has one.
std::string text_report(const ReportInput& input);

}  // namespace memsnap
