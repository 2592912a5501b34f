// The memory budget in the text report ("Memory budget" section) and the JSON report ("budget").
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/analyze.h"

namespace memsnap {

// The main device's budgets as tables (end, peak, OOMs) with the stack-less evidence, and one
// sentence for each other device.
void budget_text_section(std::string& out, const Analysis& analysis);

// Every budget, as docs/report-schema.md describes the "budget" key.
nlohmann::ordered_json budget_json(const std::vector<MemoryBudget>& budgets);

}  // namespace memsnap
