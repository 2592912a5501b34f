// Sums the (device, pool, segment type, stream) groups into one row per (device, pool).
#include "analysis/memory_pools.h"

#include <algorithm>
#include <map>
#include <utility>

namespace memsnap {

std::vector<PoolTotals> reserved_by_pool(const std::vector<PoolStreamFree>& groups) {
  std::map<std::pair<std::int64_t, PoolId>, PoolTotals> rows;
  for (const PoolStreamFree& g : groups) {
    PoolTotals& r = rows[{g.device, g.pool}];
    r.device = g.device;
    r.pool = g.pool;
    r.reserved += g.totals.reserved;
    r.allocated += g.totals.allocated;
    r.pending_free += g.totals.pending_free;
    r.inactive += g.totals.inactive;
    r.segments += g.totals.segments;
    r.largest_inactive_block = std::max(r.largest_inactive_block, g.totals.largest_inactive_block);
  }
  std::vector<PoolTotals> out;
  out.reserve(rows.size());
  for (auto& [key, r] : rows) out.push_back(r);
  return out;
}

bool has_private_pools(const std::vector<PoolTotals>& pools) {
  return std::any_of(pools.begin(), pools.end(), [](const PoolTotals& p) { return !p.pool.is_default(); });
}

}  // namespace memsnap
