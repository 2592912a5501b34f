// What every report writer formats: one snapshot's analysis, and the diff or the rank comparison
// when the run has one. Writers only format; they decide nothing.
#pragma once

#include <cstddef>

#include "analysis/analyze.h"
#include "analysis/diff.h"
#include "analysis/ranks.h"

namespace memsnap {

struct ReportInput {
  const LoadedSnapshot& loaded;     // the snapshot the body describes (LATER of a diff, the body rank)
  const Analysis& analysis;         // concluded (conclude.h)
  const DiffReport* diff = nullptr;
  const RankReport* ranks = nullptr;
};

}  // namespace memsnap
