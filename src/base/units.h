// Byte units and ASCII lower-casing, shared by the analysis rules (one definition each, so that
// files compiled together in a unity build cannot define them twice).
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>

namespace memsnap {

inline constexpr std::uint64_t kKiB = 1ull << 10;
inline constexpr std::uint64_t kMiB = 1ull << 20;
inline constexpr std::uint64_t kGiB = 1ull << 30;

// `s` with A-Z as a-z (names, markers and file names are compared this way).
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace memsnap
