// The "what" lines under a site of the text report.
#include "report/site_what_text.h"

#include <fmt/format.h>

namespace memsnap {

std::string site_what_lines(const Site& site, WrapText wrap) {
  if (site.no_stack) return "";
  std::string what = site.what;
  if (!site.what_op.empty() && site.what_op != site.what) what += what.empty() ? site.what_op : " (" + site.what_op + ")";
  if (site.known) what = what.empty() ? std::string(site.known->name) : fmt::format("{}: {}", site.known->name, what);
  if (what.empty()) return "";
  std::string out = wrap(what, "      what ", "           ");
  if (site.known) out += wrap(fmt::format("{}; change: {}", site.known->note, site.known->knob), "      note ", "           ");
  return out;
}

}  // namespace memsnap
