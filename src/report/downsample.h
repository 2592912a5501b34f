// Min/max-per-bucket downsampling of long curves for plots. Every bucket keeps the index of its
// smallest and of its largest value, so the global peak (and minimum) stay exact and short spikes
// stay visible however many points are dropped.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace memsnap {

// Indices (ascending, unique) of the points to keep from `curves` curves sharing one x axis of `n`
// points. Kept: the first and last point, the `keep` indices (markers: the peak, OOMs), and in
// each bucket the first index of every curve's minimum and maximum, as extremes(c, begin, end)
// gives them (a pair, over points [begin, end)); the buckets are asked in ascending order, and
// for each bucket every curve in turn. The result has at most `max_points` indices when
// max_points >= 2 + keep.size() + 2 * curves; with n <= max_points it is every index. Each
// curve's global maximum is always kept. A curve that knows a range's extremes without reading
// every point (LiveCurve::extremes) is downsampled here directly.
template <typename BucketExtremes>
std::vector<std::size_t> downsample_by_buckets(std::size_t n, std::size_t curves, BucketExtremes&& extremes, std::size_t max_points,
                                               std::span<const std::size_t> keep = {}) {
  std::vector<std::size_t> out;
  if (n == 0) return out;
  if (n <= max_points) {
    out.resize(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = i;
    return out;
  }
  const std::size_t fixed = 2 + keep.size();
  const std::size_t per_bucket = 2 * std::max<std::size_t>(1, curves);
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
    for (std::size_t c = 0; c < curves; ++c) {
      const auto [lo, hi] = extremes(c, begin, end);
      out.push_back(lo);
      out.push_back(hi);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The first index of the minimum and of the maximum of value(i) over [begin, end), read in order.
template <typename ValueAt>
std::pair<std::size_t, std::size_t> walk_extremes(ValueAt&& value, std::size_t begin, std::size_t end) {
  std::size_t lo = begin, hi = begin;
  std::int64_t low = value(begin), high = low;
  for (std::size_t i = begin + 1; i < end; ++i) {
    const std::int64_t v = value(i);
    if (v < low) lo = i, low = v;
    if (v > high) hi = i, high = v;
  }
  return {lo, hi};
}

// downsample_by_buckets over curves read through value(c, i) (curve c at point i). Each curve's
// points are read once, in ascending order, so a curve need not be an array (LiveCurve::Reader,
// ReservedCurveReader).
template <typename ValueAt>
std::vector<std::size_t> downsample_indices(std::size_t n, std::size_t curves, ValueAt&& value, std::size_t max_points,
                                            std::span<const std::size_t> keep = {}) {
  auto walk = [&](std::size_t c, std::size_t begin, std::size_t end) {
    return walk_extremes([&](std::size_t i) { return value(c, i); }, begin, end);
  };
  return downsample_by_buckets(n, curves, walk, max_points, keep);
}

// value(i) at each of `indices`, in their order.
template <typename ValueAt>
std::vector<std::int64_t> values_at(std::span<const std::size_t> indices, ValueAt&& value) {
  std::vector<std::int64_t> out;
  out.reserve(indices.size());
  for (std::size_t i : indices) out.push_back(value(i));
  return out;
}

}  // namespace memsnap
