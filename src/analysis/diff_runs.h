// Two snapshots as two runs (two configurations of one script, say fp32 and bf16) rather than two
// points of one run: the evidence that tells them apart, peak against peak by kind, and the
// allocator settings that differ.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/attribution.h"
#include "analysis/diagnosis.h"
#include "base/enum_names.h"
#include "model/snapshot.h"

namespace memsnap {

// OneRun: the pair can be two points of one run (the default). TwoRuns: the evidence says two
// separate runs (different settings, devices or parameter memory; or no segment address in
// common: two processes, and when both traces open with the same sites, one script run twice).
enum class DiffRelation { OneRun, TwoRuns };
template <>
struct EnumNames<DiffRelation> {
  static constexpr std::array<std::string_view, 2> names = {"one_run", "two_runs"};
};

// Live bytes of one kind at each side's peak (or at the end when a side has no peak), and the
// site that changed most within it.
struct KindDelta {
  Category category = Category::Unknown;
  std::uint64_t before = 0, after = 0;
  std::int64_t delta = 0;
  std::string top_site;  // "" when the kind has no site with a stack
  std::string top_function;
  std::int64_t top_site_delta = 0;
};

// Bytes by kind (indexed by Category) at the compared moment, as each side's budget counts them.
using KindTotals = std::array<std::uint64_t, EnumNames<Category>::names.size()>;

// Kinds by |delta|, largest first; kinds equal on both sides are left out. The kinds' bytes are the
// budgets' when both are given (`before_kinds`, `after_kinds`: stack-less blocks told by their
// sizes, as each report's own budget says them), else the sites'; the top site of a kind comes
// from the sites, named only when it holds at least an eighth of the kind's change.
std::vector<KindDelta> kind_deltas(const std::vector<Site>& before, const std::vector<Site>& after,
                                   const std::optional<KindTotals>& before_kinds = std::nullopt,
                                   const std::optional<KindTotals>& after_kinds = std::nullopt);

struct SettingChange {
  std::string key, before, after;  // values as compact JSON; "" when absent on that side
};

// The allocator_settings keys whose values differ (both sides' settings as JSON dicts).
std::vector<SettingChange> setting_changes(const AllocatorSettings& before, const AllocatorSettings& after);

// Two runs that both have steps, step i against step i on each side's peak device: the highest
// live bytes within each step, and live memory at the first and last boundary (growth).
struct StepAlignedDiff {
  std::int64_t device_before = 0, device_after = 0;
  std::vector<std::int64_t> peak_before, peak_after;  // per step, the first `steps` of each side
  std::size_t steps = 0;                               // steps compared (the fewer of the two)
  std::int64_t median_delta = 0;                       // median of after - before over the steps
  std::int64_t growth_before = 0, growth_after = 0;    // live at the last boundary - at the first
};

// nullopt unless both sides found steps on the device of their highest peak.
std::optional<StepAlignedDiff> step_aligned(const std::vector<DeviceSteps>& before, std::int64_t before_device,
                                            const std::vector<DeviceSteps>& after, std::int64_t after_device);

// The first `n` allocations of the trace (all devices, in order) as site labels.
std::vector<std::string> opening_sites(const Snapshot& snapshot, std::size_t n);

// Whether two traces open with the same allocation sites: of the distinct sites among the first
// 32 allocations (at least 4 on each side), 3/4 of the smaller set are in the other.
bool same_opening(const Snapshot& before, const Snapshot& after);

// Whether a segment of `after` starts at the address (on the device) of one of `before`: memory
// that outlives a dump keeps its address within one process (true when a side has no segments).
bool share_segment_addresses(const Snapshot& before, const Snapshot& after);

}  // namespace memsnap
