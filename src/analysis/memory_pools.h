// Reserved memory by memory pool (device x segment_pool_id): the default pool, CUDA graph
// private pools and graph_pool_handle() / torch.cuda.MemPool pools, from the (device, pool,
// segment type, stream) groups of free_by_pool_and_stream().
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/fragmentation.h"

namespace memsnap {

struct PoolTotals {
  std::int64_t device = 0;
  PoolId pool;
  std::uint64_t reserved = 0;
  std::uint64_t allocated = 0;
  std::uint64_t pending_free = 0;
  std::uint64_t inactive = 0;
  std::uint64_t segments = 0;
  std::uint64_t largest_inactive_block = 0;
};

// One row per (device, pool), default pool first on each device.
std::vector<PoolTotals> reserved_by_pool(const std::vector<PoolStreamFree>& groups);

// True when some pool other than the default holds memory (the pool tables are worth showing).
bool has_private_pools(const std::vector<PoolTotals>& pools);

}  // namespace memsnap
