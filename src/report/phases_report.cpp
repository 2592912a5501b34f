// The phases section of the text and JSON reports (phases_report.h).
#include "report/phases_report.h"

#include <fmt/format.h>

#include "base/format_bytes.h"
#include "base/plural.h"

namespace memsnap {
namespace {

constexpr std::size_t kListedSpans = 8;          // per device, in the text
constexpr std::size_t kMaxJsonSpans = 2000;      // per device, in the JSON

bool shows_phases(const DevicePhases& d) {
  return std::any_of(d.spans.begin(), d.spans.end(), [](const PhaseSpan& s) { return s.phase != Phase::Other; });
}

// What is live at the device's peak by kind, largest first: the peak's memory budget, whose rows
// also give stack-less blocks a kind where their sizes tell it (parameters, gradients, optimizer
// state allocated before the recording); the peak's sites by their stacks' kinds when there is
// no budget.
std::vector<std::pair<Category, std::uint64_t>> peak_live_by_kind(const Analysis& a, std::int64_t device) {
  if (const MemoryBudget* b = peak_budget(a.budgets, device)) return kinds_largest_first(*b);
  return live_by_kind(a.sites_at_peak);
}

std::string source_text(const DevicePhases& d) {
  std::string out = d.annotated ? "annotations and stacks" : "stacks";
  if (d.backward_from_free_order) out += "; backward without frames inferred from the order of frees";
  return out;
}

}  // namespace

std::vector<std::string> phase_text_lines(const Analysis& a) {
  std::vector<std::string> out;
  for (const DevicePhases& d : a.phases) {
    if (!shows_phases(d)) continue;
    out.push_back(fmt::format("device {}: {} iteration{} (phases from {})", d.device, d.iterations, plural_s(d.iterations),
                              source_text(d)));
    std::size_t shown = 0;
    for (std::size_t i = 0; i < d.spans.size(); ++i) {
      const PhaseSpan& sp = d.spans[i];
      const bool peak = d.peak && d.peak->span == i;
      if (shown >= kListedSpans && !peak) continue;
      ++shown;
      out.push_back(fmt::format("  {}{}: events {}-{}, {} -> {} at most{}", sp.iteration ? fmt::format("{}. ", sp.iteration) : "",
                                phase_label(sp), sp.first, sp.end - 1, format_bytes(sp.live_start), format_bytes(sp.live_max),
                                peak ? "  <- the peak" : ""));
    }
    if (d.spans.size() > shown) out.push_back(fmt::format("  ... {} phases in all", d.spans.size()));
    if (d.peak && d.device == a.peak_device) {
      const DeviceTimeline* t = nullptr;
      for (const auto& tl : a.timelines) {
        if (tl.device == d.device) t = &tl;
      }
      const std::string kinds = kinds_list(peak_live_by_kind(a, d.device), kind_text);
      out.push_back(fmt::format("The peak ({}) is in {}{}", t && t->peak_allocated ? format_bytes(*t->peak_allocated) : "?",
                                peak_place_text(d), kinds.empty() ? "" : "; live then by kind: " + kinds));
    }
  }
  return out;
}

nlohmann::ordered_json phases_json(const Analysis& a) {
  auto devices = nlohmann::ordered_json::array();
  for (const DevicePhases& d : a.phases) {
    nlohmann::ordered_json j;
    j["device"] = d.device;
    j["iterations"] = d.iterations;
    j["backward_from_frames"] = d.backward_from_frames;
    j["backward_from_free_order"] = d.backward_from_free_order;
    auto spans = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < d.spans.size() && i < kMaxJsonSpans; ++i) {
      const PhaseSpan& sp = d.spans[i];
      spans.push_back({{"phase", name_of(sp.phase)}, {"source", name_of(sp.source)}, {"first_event", sp.first}, {"end_event", sp.end},
                       {"iteration", sp.iteration}, {"live_start", sp.live_start}, {"live_max", sp.live_max},
                       {"start_us", sp.start_us}, {"end_us", sp.end_us}});
    }
    j["spans"] = spans;
    if (d.spans.size() > kMaxJsonSpans) j["spans_not_listed"] = d.spans.size() - kMaxJsonSpans;
    if (d.peak) {
      nlohmann::ordered_json p{{"phase", name_of(d.peak->phase)}, {"span", d.peak->span}, {"iteration", d.peak->iteration}};
      if (d.device == a.peak_device) {
        auto kinds = nlohmann::ordered_json::object();
        for (const auto& [c, bytes] : peak_live_by_kind(a, d.device)) kinds[category_name(c)] = bytes;
        p["live_by_kind"] = kinds;
      }
      j["peak"] = p;
    } else {
      j["peak"] = nullptr;
    }
    devices.push_back(std::move(j));
  }
  return devices;
}

}  // namespace memsnap
