// Fast JSON string escaping for streaming output (dump's JSON Lines), replacing invalid UTF-8;
// and the same replacement for plain text.
#pragma once

#include <fmt/format.h>
#include <string>
#include <string_view>

namespace memsnap {

// Appends `s` as a quoted JSON string.
void append_json_string(fmt::memory_buffer& out, std::string_view s);

// `s` with every invalid UTF-8 sequence (stray bytes, overlongs, lone surrogates) replaced by
// U+FFFD; valid text is returned unchanged.
std::string valid_utf8(std::string_view s);

}  // namespace memsnap
