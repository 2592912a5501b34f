// Values no real snapshot holds (sizes beyond any device, times near 2^63, sums that pass 2^63):
// named as inconsistencies, so a report built on them says so (invariants.ok is false).
#pragma once

#include <string>
#include <vector>

#include "model/snapshot.h"

namespace memsnap {

// Any size above this (1 PiB) is beyond any device memory there is.
inline constexpr std::uint64_t kMaxPlausibleBytes = 1ull << 50;
// Trace times are microseconds since the epoch (about 2^51 today); beyond 2^60 is not a time.
inline constexpr std::int64_t kMaxPlausibleTimeUs = std::int64_t{1} << 60;

// One line per kind of implausible value found, with the first example.
std::vector<std::string> implausible_values(const Snapshot& s);

}  // namespace memsnap
