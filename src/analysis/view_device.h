// The device the default views show (the text report's peak section, the HTML charts that draw
// one device): the device of the first OOM, else the one with the highest peak, else the one with
// the most live memory at the end. It is the memory budget's main device (main_budget()).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "analysis/memory_budget.h"
#include "base/enum_names.h"

namespace memsnap {

enum class ViewReason { None, Oom, HighestPeak, MostLive };
template <>
struct EnumNames<ViewReason> {
  static constexpr std::array<std::string_view, 4> names = {"none", "oom", "highest_peak", "most_live"};
};

struct DefaultView {
  std::int64_t device = -1;  // -1: no device (an empty snapshot)
  ViewReason reason = ViewReason::None;
};

DefaultView default_view(const std::vector<MemoryBudget>& budgets);

// "device 1, the OOM device", "device 0, the highest peak", "device 2, the most live memory".
std::string view_device_text(const DefaultView& view);

}  // namespace memsnap
