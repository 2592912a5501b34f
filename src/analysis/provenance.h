// Where a live block came from, as the trace proves it: allocated inside the recorded window
// (its alloc stack is the allocation's), before the window began (live at the end, or freed in
// the window, with no alloc in it), or unknown because the device has no trace at all.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "base/enum_names.h"

namespace memsnap {

enum class Provenance { InWindow, BeforeWindow, NoTrace };
template <>
struct EnumNames<Provenance> {
  static constexpr std::array<std::string_view, 3> names = {"in_window", "before_window", "no_trace"};
};
inline constexpr std::size_t kProvenanceCount = EnumNames<Provenance>::names.size();

}  // namespace memsnap
