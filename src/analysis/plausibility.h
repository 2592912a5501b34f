// Values no real snapshot holds (sizes beyond any device, times near 2^63, sums that pass 2^63):
// named as inconsistencies, so a report built on them says so (invariants.ok is false).
#pragma once

#include <string>
#include <vector>

#include "model/snapshot.h"

namespace memsnap {

// The bounds, kMaxPlausibleBytes and kMaxPlausibleTimeUs, are in model/snapshot.h (the event
// store's pass checks the events against them while reading: TraceScan).

// One line per kind of implausible value found, with the first example.
std::vector<std::string> implausible_values(const Snapshot& s);

}  // namespace memsnap
