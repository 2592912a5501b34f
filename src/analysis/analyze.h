// Everything memsnap concludes from one snapshot, as plain data for the report writers.
#pragma once

#include "analysis/totals.h"
#include "analysis/trace_summary.h"
#include "model/load.h"

namespace memsnap {

struct Analysis {
  TotalsReport totals;
  TraceSummary trace;
};

Analysis analyze(const LoadedSnapshot& loaded);

}  // namespace memsnap
