// The text report's "what" lines of a site: what the memory is (the known allocator's name, the
// library frame and the op below the site's line) and, for a known allocator, its note and knob.
#pragma once

#include <string>

#include "analysis/attribution.h"

namespace memsnap {

using WrapText = std::string (*)(const std::string& text, const std::string& first, const std::string& indent);

// "" when the site has no what (its line allocates directly, or no stack).
std::string site_what_lines(const Site& site, WrapText wrap);

}  // namespace memsnap
