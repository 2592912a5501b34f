// Min/max-per-bucket downsampling (see downsample.h).
#include "report/downsample.h"

#include <algorithm>

namespace memsnap {

std::vector<std::size_t> downsample_indices(std::size_t n, std::span<const std::span<const std::int64_t>> curves,
                                            std::size_t max_points, std::span<const std::size_t> keep) {
  return downsample_indices_of(
      n, curves.size(), [&](std::size_t c, std::size_t i) { return curves[c][i]; }, max_points, keep);
}

std::vector<std::int64_t> take(std::span<const std::int64_t> curve, std::span<const std::size_t> indices) {
  std::vector<std::int64_t> out;
  out.reserve(indices.size());
  for (std::size_t i : indices) out.push_back(curve[i]);
  return out;
}

}  // namespace memsnap
