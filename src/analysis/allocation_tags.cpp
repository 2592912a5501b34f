// Allocation tags in attribution: kinds from profiler categories and user_metadata, the texts of
// a site, group rows and label totals.
#include "analysis/allocation_tags.h"

#include <algorithm>
#include <map>

namespace memsnap {
namespace {

std::optional<Category> category_named(std::string_view name) {
  const auto& names = EnumNames<Category>::names;
  for (std::size_t k = 0; k + 1 < names.size(); ++k) {
    if (names[k] == name) return static_cast<Category>(k);
  }
  return std::nullopt;
}

// The str value of `"key":"value"` in compact JSON (as PyTorch stores a dict label), or "".
std::string_view json_field(std::string_view json, std::string_view key) {
  const std::string needle = "\"" + std::string(key) + "\":\"";
  const auto at = json.find(needle);
  if (at == std::string_view::npos) return {};
  const auto start = at + needle.size();
  const auto end = json.find('"', start);
  return end == std::string_view::npos ? std::string_view() : json.substr(start, end - start);
}

void add_once(std::vector<std::string>& list, const std::string& text) {
  if (text.empty() || list.size() >= kMaxTagTexts) return;
  if (std::find(list.begin(), list.end(), text) == list.end()) list.push_back(text);
}

}  // namespace

std::optional<Category> profiler_category(std::string_view name) {
  if (name == "autograd_detail") return Category::Gradient;
  if (name == "input") return Category::Activation;
  return category_named(name);
}

std::optional<Category> metadata_kind(std::string_view label) {
  if (auto c = category_named(label)) return c;
  if (!label.starts_with("{")) return std::nullopt;
  for (std::string_view key : {"kind", "category"}) {
    if (auto c = category_named(json_field(label, key))) return c;
  }
  return std::nullopt;
}

std::optional<TagKind> tag_kind(const Snapshot& s, StackId stack) {
  if (s.tagged_stacks.empty()) return std::nullopt;
  const AllocationTag& tag = s.tag_of(stack);
  if (tag.category) {
    if (auto c = profiler_category(s.str(tag.category))) return TagKind{*c, true};
  }
  if (tag.label) {
    if (auto c = metadata_kind(s.str(tag.label))) return TagKind{*c, false};
  }
  return std::nullopt;
}

void add_tag_texts(const Snapshot& s, StackId stack, Site& site) {
  if (s.tagged_stacks.empty()) return;
  const AllocationTag& tag = s.tag_of(stack);
  site.region = std::string(s.str(tag.region));
  add_once(site.labels, std::string(s.str(tag.label)));
  add_once(site.notes, std::string(s.str(tag.note)));
}

void merge_tag_texts(const Site& from, Site& into) {
  for (const std::string& label : from.labels) add_once(into.labels, label);
  for (const std::string& note : from.notes) add_once(into.notes, note);
}

Site group_row(const Site& example, SiteGrouping grouping) {
  Site row = example;
  const bool by_region = grouping == SiteGrouping::Region;
  row.group = by_region ? "region" : "label";
  const std::string& name = by_region ? example.region : (example.labels.empty() ? std::string() : example.labels.front());
  row.site = !name.empty() ? name : by_region ? "[no compiled region]" : "[no label]";
  row.no_stack = false;
  row.file.clear();
  row.line = 0;
  row.function = by_region ? "compiled region" : "label";  // "look at decoder (label)"
  row.call_path.clear();
  row.via_forward_frames = row.via_fx_original_trace = false;
  if (!by_region) row.labels.clear();  // the row is the label; merge_tag_texts adds it back
  return row;
}

std::vector<LabelBytes> label_bytes(const Snapshot& s, const std::vector<LiveItem>& items) {
  std::map<StrId, LabelBytes> by_label;
  bool any = false;
  for (const LiveItem& item : items) {
    const StrId label = s.tag_of(item.stack).label;
    any |= label != 0;
    LabelBytes& row = by_label[label];
    row.bytes += item.bytes;
    ++row.blocks;
  }
  std::vector<LabelBytes> out;
  if (!any) return out;
  for (auto& [label, row] : by_label) {
    row.label = std::string(s.str(label));
    out.push_back(row);
  }
  std::stable_sort(out.begin(), out.end(), [](const LabelBytes& a, const LabelBytes& b) {
    if (a.label.empty() != b.label.empty()) return b.label.empty();
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.label < b.label;
  });
  return out;
}

}  // namespace memsnap
