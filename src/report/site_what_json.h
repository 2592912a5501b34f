// The JSON keys of a site's "what": what, what_frame, what_op, known_allocator and, when the
// snapshot is at hand, full_stack (docs/report-schema.md).
#pragma once

#include <nlohmann/json.hpp>

#include "analysis/attribution.h"

namespace memsnap {

void add_site_what(nlohmann::ordered_json& j, const Site& site, const Snapshot* snapshot);

}  // namespace memsnap
