// Min/max-per-bucket downsampling (see downsample.h).
#include "report/downsample.h"

#include <algorithm>

namespace memsnap {

std::vector<std::size_t> downsample_indices(std::size_t n, std::span<const std::span<const std::int64_t>> curves,
                                            std::size_t max_points, std::span<const std::size_t> keep) {
  std::vector<std::size_t> out;
  if (n == 0) return out;
  if (n <= max_points) {
    out.resize(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = i;
    return out;
  }
  const std::size_t fixed = 2 + keep.size();
  const std::size_t per_bucket = 2 * std::max<std::size_t>(1, curves.size());
  const std::size_t buckets = std::clamp<std::size_t>(max_points > fixed ? (max_points - fixed) / per_bucket : 1, 1, n);
  out.reserve(fixed + buckets * per_bucket);
  out.push_back(0);
  out.push_back(n - 1);
  for (std::size_t k : keep) {
    if (k < n) out.push_back(k);
  }
  for (std::size_t b = 0; b < buckets; ++b) {
    const std::size_t begin = b * n / buckets;
    const std::size_t end = (b + 1) * n / buckets;
    if (begin >= end) continue;
    for (const auto& curve : curves) {
      std::size_t lo = begin, hi = begin;
      for (std::size_t i = begin + 1; i < end; ++i) {
        if (curve[i] < curve[lo]) lo = i;
        if (curve[i] > curve[hi]) hi = i;
      }
      out.push_back(lo);
      out.push_back(hi);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::int64_t> take(std::span<const std::int64_t> curve, std::span<const std::size_t> indices) {
  std::vector<std::int64_t> out;
  out.reserve(indices.size());
  for (std::size_t i : indices) out.push_back(curve[i]);
  return out;
}

}  // namespace memsnap
