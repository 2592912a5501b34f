// Parses Python traceback text (traceback.format_stack() entries) into file, line and function.
#include "model/traceback_text.h"

namespace memsnap {
namespace {

// One `File "F", line N, in NAME` line (leading spaces allowed); false for any other line.
bool parse_line(std::string_view line, TextFrame& out) {
  const std::size_t start = line.find("File \"");
  if (start == std::string_view::npos) return false;
  const std::size_t file_begin = start + 6;
  const std::size_t file_end = line.find("\", line ", file_begin);
  if (file_end == std::string_view::npos) return false;
  std::size_t p = file_end + 8;
  std::int64_t number = 0;
  const std::size_t digits_begin = p;
  while (p < line.size() && line[p] >= '0' && line[p] <= '9' && p - digits_begin < 18) number = number * 10 + (line[p++] - '0');
  if (p == digits_begin) return false;
  out.file = line.substr(file_begin, file_end - file_begin);
  out.line = number;
  out.name = {};
  if (line.substr(p).starts_with(", in ")) {
    std::string_view name = line.substr(p + 5);
    while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.remove_suffix(1);
    out.name = name;
  }
  return true;
}

}  // namespace

std::vector<TextFrame> parse_traceback(std::string_view text) {
  std::vector<TextFrame> out;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    TextFrame f;
    if (parse_line(line, f)) out.push_back(f);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

}  // namespace memsnap
