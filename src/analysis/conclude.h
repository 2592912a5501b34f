// The conclude stage: the only writer of the headline, the next steps and the uncertainties, and
// of the sites' final categories, for one snapshot, a diff (PATH --diff LATER) and a directory
// of ranks. It reads typed findings and measured facts, never report prose.
#pragma once

#include <string>

#include "analysis/analyze.h"
#include "analysis/diff.h"
#include "analysis/ranks.h"

namespace memsnap {

// One snapshot: settles the site categories, then writes headline, next steps, uncertainties.
void conclude(const Snapshot& snapshot, Analysis& analysis);

// The pair: the diff's patterns merged into LATER's (by id), its headline, next steps and
// warnings; `later` was concluded as one snapshot first.
void conclude_diff(const DiffReport& diff, Analysis& later);

// A rank directory: the body rank's analysis gets the comparison's headline, the patterns found
// across ranks and their next steps; `body` was concluded as one snapshot first.
void conclude_ranks(const RankReport& ranks, Analysis& body);

std::string diff_headline(const DiffReport& diff);
std::string ranks_headline(const RankReport& ranks);

}  // namespace memsnap
