// plural_s: the plural ending of a counted noun in a report's prose ("1 block", "3 blocks").
#pragma once

#include <cstdint>
#include <string>

namespace memsnap {

// "" for one, "s" otherwise: fmt::format("{} block{}", n, plural_s(n)).
inline std::string plural_s(std::uint64_t n) { return n == 1 ? "" : "s"; }

}  // namespace memsnap
