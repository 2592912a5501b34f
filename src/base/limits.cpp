// The memory budget: half of physical memory, computed once.
#include "base/limits.h"

#include <algorithm>
#include <unistd.h>

namespace memsnap::limits {

std::uint64_t memory_budget_bytes() {
  static const std::uint64_t budget = [] {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    const std::uint64_t physical = pages > 0 && page_size > 0 ? std::uint64_t(pages) * std::uint64_t(page_size) : (8ull << 30);
    return std::min<std::uint64_t>(physical / 2, 64ull << 30);
  }();
  return budget;
}

}  // namespace memsnap::limits
