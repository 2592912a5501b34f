// Memory pools of the caching allocator: PyTorch's MempoolId_t (segment_pool_id, a trace entry's
// pool_id) and what kind of pool an id names. (0, 0) is the default pool; (id, 0) a CUDA graph's
// own private pool (capture_begin without a pool); (0, id) a pool made by graph_pool_handle()
// (shared by CUDA graphs, as torch.compile's cudagraph trees do) or by torch.cuda.MemPool.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace memsnap {

struct PoolId {
  std::int64_t first = 0;
  std::int64_t second = 0;
  bool is_default() const { return first == 0 && second == 0; }
  auto operator<=>(const PoolId&) const = default;
};

enum class PoolKind : std::uint8_t { Default, CudaGraph, UserPool };

inline PoolKind pool_kind(const PoolId& p) {
  if (p.is_default()) return PoolKind::Default;
  return p.first != 0 ? PoolKind::CudaGraph : PoolKind::UserPool;
}

// The JSON name of the kind: "default", "cuda_graph", "graph_pool_or_mempool".
inline const char* pool_kind_name(PoolKind k) {
  switch (k) {
    case PoolKind::Default: return "default";
    case PoolKind::CudaGraph: return "cuda_graph";
    case PoolKind::UserPool: return "graph_pool_or_mempool";
  }
  return "default";
}

// "(1,0)".
inline std::string pool_id_text(const PoolId& p) { return fmt::format("({},{})", p.first, p.second); }

// What a person reads: "the default pool", "CUDA graph private pool (1,0)",
// "private pool (0,3) (graph_pool_handle() or torch.cuda.MemPool)".
inline std::string pool_label(const PoolId& p) {
  switch (pool_kind(p)) {
    case PoolKind::Default: return "the default pool";
    case PoolKind::CudaGraph: return "CUDA graph private pool " + pool_id_text(p);
    case PoolKind::UserPool: return "private pool " + pool_id_text(p) + " (graph_pool_handle() or torch.cuda.MemPool)";
  }
  return "";
}

}  // namespace memsnap
