// Human-readable binary sizes and size parsing.
#include "base/format_bytes.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <fmt/format.h>

namespace memsnap {

std::string format_bytes(std::int64_t bytes) {
  static constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const bool negative = bytes < 0;
  double value = std::fabs(static_cast<double>(bytes));
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  const char* sign = negative ? "-" : "";
  if (unit == 0) return fmt::format("{}{} B", sign, static_cast<long long>(value));
  return fmt::format("{}{:.2f} {}", sign, value, kUnits[unit]);
}

std::string format_bytes(std::uint64_t bytes) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  return format_bytes(static_cast<std::int64_t>(bytes > kMax ? kMax : bytes));
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  const std::string number(text.substr(0, i));
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || value < 0) return std::nullopt;
  std::string unit;
  for (char c : text.substr(i)) {
    if (c != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (!unit.empty() && unit.back() == 'b' && unit != "b") unit.pop_back();  // "GiB"->"gi", "GB"->"g"
  double scale = 1;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "ki") scale = 1024.0;
  else if (unit == "mi") scale = 1024.0 * 1024;
  else if (unit == "gi") scale = 1024.0 * 1024 * 1024;
  else if (unit == "ti") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "k") scale = 1e3;
  else if (unit == "m") scale = 1e6;
  else if (unit == "g") scale = 1e9;
  else if (unit == "t") scale = 1e12;
  else return std::nullopt;
  const double bytes = value * scale;
  if (!(bytes < 9223372036854775808.0)) return std::nullopt;  // 2^63: sizes are int64 in the analysis
  return static_cast<std::uint64_t>(std::llround(bytes));
}

}  // namespace memsnap
