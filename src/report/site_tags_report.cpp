// Allocation tags in the text and JSON reports (see site_tags_report.h).
#include "report/site_tags_report.h"

#include <fmt/format.h>

#include "base/format_bytes.h"

namespace memsnap {
namespace {

std::string joined(const std::vector<std::string>& texts) {
  std::string out;
  for (const std::string& t : texts) out += (out.empty() ? "" : ", ") + t;
  return out;
}

}  // namespace

std::string site_tag_lines(const Site& s, WrapText wrap) {
  std::string out;
  if (s.via_fx_original_trace) out += wrap("(model line of compiled code, from fx_original_trace)", "      ", "        ");
  if (!s.region.empty() && s.group != "region") out += wrap(s.region, "      compiled region: ", "        ");
  if (!s.labels.empty() && s.group != "label") out += wrap(joined(s.labels), "      label: ", "        ");
  for (const std::string& note : s.notes) out += wrap(note, "      annotated: ", "        ");
  return out;
}

std::string group_row_line(const Site& s, WrapText wrap) {
  return wrap(s.site, s.group == "region" ? "      compiled region " : "      label ", "        ");
}

void labels_text(std::string& out, const std::vector<LabelBytes>& labels) {
  if (labels.empty()) return;
  out += "\nLabels (user_metadata)\n";
  for (const LabelBytes& l : labels) {
    out += fmt::format("  {:>10}  {:>5} blocks  {}\n", format_bytes(l.bytes), l.blocks, l.label.empty() ? "[no label]" : l.label);
  }
}

void add_site_tags(nlohmann::ordered_json& j, const Site& s) {
  if (s.via_fx_original_trace) j["via_fx_original_trace"] = true;
  if (!s.region.empty()) j["region"] = s.region;
  if (!s.labels.empty()) j["labels"] = s.labels;
  if (!s.notes.empty()) j["notes"] = s.notes;
  if (!s.group.empty()) j["group"] = s.group;
}

nlohmann::ordered_json labels_json(const std::vector<LabelBytes>& labels) {
  auto arr = nlohmann::ordered_json::array();
  for (const LabelBytes& l : labels) arr.push_back({{"label", l.label}, {"bytes", l.bytes}, {"blocks", l.blocks}});
  return arr;
}

}  // namespace memsnap
