// Runs the analysis stages over a loaded snapshot.
#include "analysis/analyze.h"

namespace memsnap {

Analysis analyze(const LoadedSnapshot& loaded) {
  Analysis a;
  a.totals = compute_totals(loaded.snapshot);
  a.trace = summarize_trace(loaded.snapshot);
  return a;
}

}  // namespace memsnap
