// Checked 64-bit arithmetic for sizes, times and their differences taken from untrusted input:
// saturating at the int64 limits (a difference or sum that cannot be shown), or wrapping in two's
// complement where a running sum must cancel exactly (difference arrays). Absurd values themselves
// are flagged by analysis/plausibility; these only keep the arithmetic defined (no UBSan report).
#pragma once

#include <cstdint>
#include <limits>

namespace memsnap {

inline constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();

// a + b, held at the int64 limits.
inline std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return b > 0 ? kInt64Max : kInt64Min;
}

// a - b, held at the int64 limits.
inline std::int64_t saturating_sub(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (!__builtin_sub_overflow(a, b, &r)) return r;
  return b < 0 ? kInt64Max : kInt64Min;
}

// An unsigned count or size as int64, held at INT64_MAX.
inline std::int64_t saturating_int64(std::uint64_t v) {
  return v > static_cast<std::uint64_t>(kInt64Max) ? kInt64Max : static_cast<std::int64_t>(v);
}

// b - a of two unsigned values as int64, held at -INT64_MAX .. INT64_MAX (so it can be negated).
inline std::int64_t saturating_difference(std::uint64_t a, std::uint64_t b) {
  if (b >= a) return saturating_int64(b - a);
  return -saturating_int64(a - b);
}

// |a - b|, exact.
inline std::uint64_t absolute_difference(std::int64_t a, std::int64_t b) {
  return a > b ? static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b)
               : static_cast<std::uint64_t>(b) - static_cast<std::uint64_t>(a);
}

// a + b and a - b modulo 2^64 (running sums whose terms cancel: the exact result whenever it fits).
inline std::int64_t wrapping_add(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
inline std::int64_t wrapping_sub(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}

}  // namespace memsnap
