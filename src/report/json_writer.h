// Fast JSON string escaping for streaming output (dump's JSON Lines), replacing invalid UTF-8.
#pragma once

#include <fmt/format.h>
#include <string_view>

namespace memsnap {

// Appends `s` as a quoted JSON string.
void append_json_string(fmt::memory_buffer& out, std::string_view s);

}  // namespace memsnap
