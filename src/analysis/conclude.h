// The conclude stage: the only writer of the headline, the next steps and the uncertainties, and
// of the sites' final categories, for one snapshot, a diff (PATH --diff LATER) and a directory
// of ranks. It reads typed findings and measured facts, never report prose.
#pragma once

#include <string>

#include "analysis/analyze.h"
#include "analysis/diff.h"
#include "analysis/ranks.h"

namespace memsnap {

// The last word on a site's category: a site the growing_container pattern names holds a user
// container's tensors. Run once, before conclude() and before any diff or report reads the sites.
void settle_categories(const std::vector<Pattern>& patterns, std::vector<Site>& sites);

// One snapshot: the headline, next steps and uncertainties.
Conclusions conclude(const Snapshot& snapshot, const Analysis& analysis);

// The pair: the diff's patterns merged into LATER's (by id), its headline, next steps and
// warnings; `later` was concluded as one snapshot first.
void conclude_diff(const DiffReport& diff, Analysis& later);

// A rank directory: the body rank's analysis gets the comparison's headline, the patterns found
// across ranks and their next steps; `body` was concluded as one snapshot first.
void conclude_ranks(const RankReport& ranks, Analysis& body);

std::string diff_headline(const DiffReport& diff);
std::string ranks_headline(const RankReport& ranks);

}  // namespace memsnap
