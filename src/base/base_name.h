// The last component of a path ("a/b/model.py" -> "model.py"), for short labels in prose.
#pragma once

#include <string>
#include <string_view>

namespace memsnap {

inline std::string base_name(std::string_view path) {
  const std::size_t slash = path.find_last_of("/\\");
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace memsnap
