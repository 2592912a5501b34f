// The default view's device, read from the memory budget the report leads with.
#include "analysis/view_device.h"

#include <fmt/format.h>

namespace memsnap {

DefaultView default_view(const std::vector<MemoryBudget>& budgets) {
  const MemoryBudget* main = main_budget(budgets);
  if (!main) return {};
  switch (main->moment) {
    case BudgetMoment::Oom: return {main->device, ViewReason::Oom};
    case BudgetMoment::Peak: return {main->device, ViewReason::HighestPeak};
    case BudgetMoment::End: break;
  }
  return {main->device, ViewReason::MostLive};
}

std::string view_device_text(const DefaultView& view) {
  switch (view.reason) {
    case ViewReason::Oom: return fmt::format("device {}, the OOM device", view.device);
    case ViewReason::HighestPeak: return fmt::format("device {}, the highest peak", view.device);
    case ViewReason::MostLive: return fmt::format("device {}, the most live memory", view.device);
    case ViewReason::None: break;
  }
  return "no device";
}

}  // namespace memsnap
