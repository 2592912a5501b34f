// A site's "what" keys in the JSON report.
#include "report/site_what_json.h"

#include "analysis/site_what.h"

namespace memsnap {

void add_site_what(nlohmann::ordered_json& j, const Site& site, const Snapshot* snapshot) {
  j["what"] = site.what;
  j["what_frame"] = site.what_frame;
  j["what_op"] = site.what_op;
  if (site.known) {
    j["known_allocator"] = {{"id", site.known->id}, {"name", site.known->name}, {"note", site.known->note}, {"knob", site.known->knob}};
  } else {
    j["known_allocator"] = nullptr;
  }
  if (!snapshot || site.no_stack) return;  // the ranks' lists carry no full stacks
  j["full_stack"] = site.full_stack.empty() ? full_stack(*snapshot, site.example_stack) : site.full_stack;
}

}  // namespace memsnap
