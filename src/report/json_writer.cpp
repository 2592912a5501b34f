// JSON string escaping with UTF-8 validation, and plain-text UTF-8 repair (invalid sequences
// become U+FFFD).
#include "report/json_writer.h"

namespace memsnap {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when invalid.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = 0;
  unsigned min = 0;
  if (c >= 0xC2 && c <= 0xDF) { n = 2; min = 0x80; }
  else if (c >= 0xE0 && c <= 0xEF) { n = 3; min = 0x800; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 4; min = 0x10000; }
  else return 0;
  if (i + n > s.size()) return 0;
  unsigned cp = c & (0xFF >> (n + 1));
  for (std::size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

constexpr char kReplacement[] = "\xEF\xBF\xBD";

}  // namespace

std::string valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80) ++i;
  if (i == s.size()) return std::string(s);
  std::string out(s.substr(0, i));
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      out.push_back(s[i++]);
    } else if (const std::size_t n = utf8_sequence(s, i)) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out.append(kReplacement, 3);
      ++i;
    }
  }
  return out;
}

void append_json_string(fmt::memory_buffer& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20) {
      const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      out.append(esc, esc + 6);
      ++i;
    } else if (const std::size_t n = utf8_sequence(s, i)) {
      out.append(s.data() + i, s.data() + i + n);
      i += n;
    } else {
      out.append(kReplacement, kReplacement + 3);
      ++i;
    }
  }
  out.push_back('"');
}

}  // namespace memsnap
