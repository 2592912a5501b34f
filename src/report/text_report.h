// The human-readable report for an 80-column terminal.
#pragma once

#include <string>

#include "analysis/analyze.h"

namespace memsnap {

std::string text_report(const LoadedSnapshot& loaded, const Analysis& analysis);

}  // namespace memsnap
