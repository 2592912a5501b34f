// Evidence that two snapshots are two runs, and the peak-against-peak comparison by kind.
#include "analysis/diff_runs.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "base/checked.h"
#include "model/settings_json.h"

namespace memsnap {
namespace {

constexpr std::size_t kOpening = 32;
constexpr std::size_t kMinOpeningSites = 4;

const DeviceSteps* steps_of(const std::vector<DeviceSteps>& steps, std::int64_t device) {
  for (const DeviceSteps& d : steps) {
    if (d.device == device && d.step_peak.size() >= 2 && d.live.size() == d.step_peak.size() + 1) return &d;
  }
  return nullptr;
}

}  // namespace

std::optional<StepAlignedDiff> step_aligned(const std::vector<DeviceSteps>& before, std::int64_t before_device,
                                            const std::vector<DeviceSteps>& after, std::int64_t after_device) {
  const DeviceSteps* b = steps_of(before, before_device);
  const DeviceSteps* a = steps_of(after, after_device);
  if (!b || !a) return std::nullopt;
  StepAlignedDiff d;
  d.device_before = before_device;
  d.device_after = after_device;
  d.steps = std::min(b->step_peak.size(), a->step_peak.size());
  d.peak_before.assign(b->step_peak.begin(), b->step_peak.begin() + static_cast<std::ptrdiff_t>(d.steps));
  d.peak_after.assign(a->step_peak.begin(), a->step_peak.begin() + static_cast<std::ptrdiff_t>(d.steps));
  std::vector<std::int64_t> deltas;
  for (std::size_t i = 0; i < d.steps; ++i) deltas.push_back(saturating_sub(d.peak_after[i], d.peak_before[i]));
  std::nth_element(deltas.begin(), deltas.begin() + static_cast<std::ptrdiff_t>(deltas.size() / 2), deltas.end());
  d.median_delta = deltas[deltas.size() / 2];
  d.growth_before = saturating_sub(b->live.back(), b->live.front());
  d.growth_after = saturating_sub(a->live.back(), a->live.front());
  return d;
}

std::vector<KindDelta> kind_deltas(const std::vector<Site>& before, const std::vector<Site>& after,
                                   const std::optional<KindTotals>& before_kinds, const std::optional<KindTotals>& after_kinds) {
  const bool from_budgets = before_kinds && after_kinds;
  std::map<Category, KindDelta> by_kind;
  std::map<std::pair<Category, std::string>, std::int64_t> site_delta;
  std::map<std::string, std::string> function_of;
  auto add = [&](const std::vector<Site>& sites, bool is_after) {
    for (const Site& s : sites) {
      if (!from_budgets) {
        KindDelta& k = by_kind[s.category];
        k.category = s.category;
        (is_after ? k.after : k.before) += s.bytes;
      }
      if (s.no_stack) continue;
      auto& d = site_delta[{s.category, s.site}];
      d = is_after ? saturating_add(d, saturating_int64(s.bytes)) : saturating_sub(d, saturating_int64(s.bytes));
      function_of.emplace(s.site, s.function);
    }
  };
  add(before, false);
  add(after, true);
  if (from_budgets) {
    for (std::size_t c = 0; c < before_kinds->size(); ++c) {
      if ((*before_kinds)[c] == 0 && (*after_kinds)[c] == 0) continue;
      KindDelta& k = by_kind[static_cast<Category>(c)];
      k.category = static_cast<Category>(c);
      k.before = (*before_kinds)[c];
      k.after = (*after_kinds)[c];
    }
  }
  std::vector<KindDelta> out;
  for (auto& [category, k] : by_kind) {
    k.delta = saturating_difference(k.before, k.after);
    if (k.delta == 0) continue;
    for (const auto& [key, d] : site_delta) {
      if (key.first != category || (d > 0) != (k.delta > 0)) continue;
      if (k.top_site.empty() || absolute_difference(d, 0) > absolute_difference(k.top_site_delta, 0)) {
        k.top_site = key.second;
        k.top_site_delta = d;
      }
    }
    // A site with a sliver of the change (the rest stack-less, or spread thin) explains nothing.
    if (absolute_difference(k.top_site_delta, 0) * 8 < absolute_difference(k.delta, 0)) k.top_site.clear(), k.top_site_delta = 0;
    if (!k.top_site.empty()) k.top_function = function_of[k.top_site];
    out.push_back(k);
  }
  std::sort(out.begin(), out.end(), [](const KindDelta& a, const KindDelta& b) {
    return absolute_difference(a.delta, 0) != absolute_difference(b.delta, 0) ? absolute_difference(a.delta, 0) > absolute_difference(b.delta, 0)
                                                                                  : a.category < b.category;
  });
  return out;
}

std::vector<SettingChange> setting_changes(const AllocatorSettings& before, const AllocatorSettings& after) {
  const nlohmann::json b = settings_object(before), a = settings_object(after);
  std::map<std::string, SettingChange> changes;
  for (const auto& [key, value] : b.items()) {
    const auto it = a.find(key);
    if (it == a.end() || *it != value) changes[key] = {key, value.dump(), it == a.end() ? "" : it->dump()};
  }
  for (const auto& [key, value] : a.items()) {
    if (!b.contains(key)) changes[key] = {key, "", value.dump()};
  }
  std::vector<SettingChange> out;
  for (auto& [key, c] : changes) out.push_back(std::move(c));
  return out;
}

std::vector<std::string> opening_sites(const Snapshot& snapshot, std::size_t n) {
  std::vector<std::string> out;
  for (const auto& d : snapshot.device_traces) {
    for (const TraceEvent& e : d.events) {
      if (out.size() == n) return out;
      if (e.action == Action::Alloc) out.push_back(site_label(snapshot, e.stack));
    }
  }
  return out;
}

bool same_opening(const Snapshot& before, const Snapshot& after) {
  auto distinct = [](const Snapshot& s) {
    std::set<std::string> out;
    for (auto& site : opening_sites(s, kOpening)) {
      if (!site.empty()) out.insert(std::move(site));
    }
    return out;
  };
  const auto b = distinct(before), a = distinct(after);
  if (std::min(a.size(), b.size()) < kMinOpeningSites) return false;
  std::size_t common = 0;
  for (const auto& site : b) common += a.count(site);
  return common * 4 >= std::min(a.size(), b.size()) * 3;
}

bool share_segment_addresses(const Snapshot& before, const Snapshot& after) {
  if (before.segments.empty() || after.segments.empty()) return true;
  std::set<std::pair<std::int64_t, std::uint64_t>> earlier;
  for (const Segment& s : before.segments) earlier.emplace(s.device, s.address);
  return std::any_of(after.segments.begin(), after.segments.end(), [&](const Segment& s) { return earlier.count({s.device, s.address}) > 0; });
}


}  // namespace memsnap
