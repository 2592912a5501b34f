// What the 2026 allocation tags (Snapshot::allocation_tags: compiled region, user_metadata label,
// annotate text, profiler category) add to attribution: the kind they name, the texts a site
// shows, the rows of --group-by region|label, and the live bytes of each label.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/attribution.h"

namespace memsnap {

// A kind named by a tag: the profiler's category (profiler-derived snapshots), else a
// user_metadata label that names one ("kv_cache", or a dict with "kind" or "category").
struct TagKind {
  Category kind = Category::Unknown;
  bool from_profiler = false;  // else from user_metadata
};
std::optional<TagKind> tag_kind(const Snapshot& snapshot, StackId stack);
// The kind a profiler category names: memsnap's kinds by name, "autograd_detail" as gradient,
// "input" as activation; nullopt for anything else.
std::optional<Category> profiler_category(std::string_view name);
// The kind a user_metadata label names, or nullopt.
std::optional<Category> metadata_kind(std::string_view label);

// Sets the site's region, labels and notes from the tag of `stack`.
void add_tag_texts(const Snapshot& snapshot, StackId stack, Site& site);
// Adds `from`'s labels and notes to `into` (each once, at most kMaxTagTexts).
inline constexpr std::size_t kMaxTagTexts = 8;
void merge_tag_texts(const Site& from, Site& into);
// A row of --group-by region|label made from the first site of the group: its site is the
// region or label ("[no compiled region]" / "[no label]" for allocations without one), its
// function "compiled region" / "label".
Site group_row(const Site& example, SiteGrouping grouping);

// Live bytes and blocks by user_metadata label, largest first ("" for unlabelled memory, last).
struct LabelBytes {
  std::string label;
  std::uint64_t bytes = 0;
  std::uint64_t blocks = 0;
};
std::vector<LabelBytes> label_bytes(const Snapshot& snapshot, const std::vector<LiveItem>& items);

}  // namespace memsnap
