// Word-wrapping for the 80-column text report, shared by its sections.
#pragma once

#include <cstddef>
#include <string>

namespace memsnap {

inline constexpr std::size_t kTextWidth = 80;

// Word-wraps `text` to kTextWidth, the first line after `first`, the rest indented by `indent`.
std::string wrap(const std::string& text, const std::string& first, const std::string& indent);

}  // namespace memsnap
