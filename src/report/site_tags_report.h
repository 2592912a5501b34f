// What the allocation tags add to the reports: a site's compiled region, labels, annotate texts
// and fx_original_trace mark (text lines and JSON keys), the rows of --group-by region|label, and
// the "Labels" section (live bytes by user_metadata label).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/allocation_tags.h"
#include "report/site_what_text.h"

namespace memsnap {

// The text lines under a site's "at" line ("" when it has no tag text).
std::string site_tag_lines(const Site& site, WrapText wrap);
// The "at" line of a --group-by region|label row.
std::string group_row_line(const Site& site, WrapText wrap);
// "Labels" with its heading, only when some live memory has a label.
void labels_text(std::string& out, const std::vector<LabelBytes>& labels);

// A site's keys: via_fx_original_trace, region, labels, notes, group (each only when set).
void add_site_tags(nlohmann::ordered_json& j, const Site& site);
// "labels": [{label, bytes, blocks}] ("" for the unlabelled rest).
nlohmann::ordered_json labels_json(const std::vector<LabelBytes>& labels);

}  // namespace memsnap
