// Word-wrapping for the text report (text_wrap.h).
#include "report/text_wrap.h"

#include <sstream>

namespace memsnap {

std::string wrap(const std::string& text, const std::string& first, const std::string& indent) {
  std::istringstream words(text);
  std::string out = first, line_word;
  std::size_t col = first.size();
  bool line_empty = true;
  while (words >> line_word) {
    if (!line_empty && col + 1 + line_word.size() > kTextWidth) {
      out += "\n" + indent;
      col = indent.size();
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++col;
    }
    out += line_word;
    col += line_word.size();
    line_empty = false;
  }
  return out + "\n";
}

}  // namespace memsnap
