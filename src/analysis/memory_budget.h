// The memory budget: per device, at the end, at the peak and before each OOM, what the live memory
// is by kind (Category), where each block came from (Provenance) and how its kind was decided
// (KindSource). Blocks with a stack take the stack rule's kind; stack-less blocks are explained by
// size arithmetic, stated as an inference with its evidence (sizes grouped, matched one to one to
// the gradients' sizes, or multiples of one set), and "unknown" when nothing matches. The rows add
// up exactly to the moment's live memory, which budget_violations() checks on every report.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analysis/attribution.h"
#include "analysis/provenance.h"
#include "analysis/timeline.h"
#include "analysis/totals.h"
#include "base/enum_names.h"
#include "model/snapshot.h"

namespace memsnap {

// How a row's kind was decided: a trace entry's `category` (profiler-derived snapshots) or a
// user_metadata label naming a kind (allocation_tags.h) come before the stack rule.
enum class KindSource { StackRule, SizeMatch, ProfilerCategory, UserMetadata, NoEvidence };
template <>
struct EnumNames<KindSource> {
  static constexpr std::array<std::string_view, 5> names = {"stack_rule", "size_match", "profiler_category", "user_metadata",
                                                            "no_evidence"};
};

enum class BudgetMoment { End, Peak, Oom };
template <>
struct EnumNames<BudgetMoment> {
  static constexpr std::array<std::string_view, 3> names = {"end", "peak", "oom"};
};

struct BudgetRow {
  Category kind = Category::Unknown;
  Provenance provenance = Provenance::InWindow;  // before_window: the "allocated before recording" rows
  KindSource source = KindSource::NoEvidence;
  std::uint64_t bytes = 0;
  std::uint64_t blocks = 0;
  double share = 0;  // percent of the moment's live bytes
};

// Stack-less blocks of one size ("96 x 100.00 MiB").
struct SizeGroup {
  std::uint64_t size = 0;  // requested bytes of each block
  std::uint64_t count = 0;
};

struct MemoryBudget {
  std::int64_t device = 0;
  BudgetMoment moment = BudgetMoment::End;
  std::size_t oom = 0;          // index into Measures::ooms (moment Oom)
  std::size_t event_index = 0;  // the state after this many events (peak and OOM)
  std::uint64_t live_bytes = 0;   // the moment's live bytes, measured apart from the rows (totals, the live curve)
  std::uint64_t blocks = 0;
  std::vector<BudgetRow> rows;  // largest first; bytes add up to live_bytes
  std::vector<SizeGroup> stackless_sizes;  // the stack-less blocks by size, largest total first
  std::vector<std::string> evidence;       // the inferences about stack-less memory, each with its evidence
  // Sites ("file:line", as Site::site) of unknown kind whose blocks match the parameters' sizes one
  // to one: one tensor per parameter (a hand-written optimizer's state, an EMA, a copy of the weights).
  std::vector<std::string> parameter_shaped_sites;
};

// The budgets of every device: the end (devices without a trace too), the peak and each OOM of
// the devices with a trace, in device order.
std::vector<MemoryBudget> memory_budgets(const Snapshot& snapshot, const std::vector<DeviceTimeline>& timelines,
                                         const TotalsReport& totals);

// One line per budget whose rows do not add up to its live bytes.
std::vector<std::string> budget_violations(const std::vector<MemoryBudget>& budgets);

// Bytes of each kind (all provenances and sources together), indexed by Category.
std::array<std::uint64_t, EnumNames<Category>::names.size()> bytes_by_kind(const MemoryBudget& budget);

// The kinds present (bytes > 0), largest first (ties in Category order).
std::vector<std::pair<Category, std::uint64_t>> kinds_largest_first(const MemoryBudget& budget);

// The budget of `device` at its peak; null when it has none (no trace).
const MemoryBudget* peak_budget(const std::vector<MemoryBudget>& budgets, std::int64_t device);

// A kind as prose ("optimizer_state" -> "optimizer state").
std::string kind_text(Category kind);
// Kinds (largest first) as a list, each written by `name`: the five largest (six when there are
// six), the rest summed ("2 other kinds 12.00 MiB"); with more than six, the smallest under 0.01%
// of the memory are left out until six remain (a 4-byte loss gradient must not turn the sixth kind
// into "2 other kinds").
std::string kinds_list(std::vector<std::pair<Category, std::uint64_t>> kinds, std::string (*name)(Category));

// "at the peak", "at the end", "before OOM 1".
std::string moment_text(const MemoryBudget& budget);

// The budget the report leads with: the OOM device's first OOM, else the peak of the device with
// the highest peak, else the end of the device with the most live memory; null when there is none.
const MemoryBudget* main_budget(const std::vector<MemoryBudget>& budgets);

// The budget in one sentence: "At the peak 50.9 GiB is live on device 0: optimizer state 25.4 GiB,
// parameters 12.8 GiB, ..." (plural kinds; "all of it" for 100%; no before-recording clause under 1%).
std::string budget_sentence(const MemoryBudget& budget);

}  // namespace memsnap
