// Min/max-per-bucket downsampling of long curves for plots. Every bucket keeps the index of its
// smallest and of its largest value, so the global peak (and minimum) stay exact and short spikes
// stay visible however many points are dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace memsnap {

// Indices (ascending, unique) of the points to keep from curves sharing one x axis; each curve
// must have `n` points. Kept: the first and last point, the `keep` indices (markers: the peak,
// OOMs), and in each bucket the first index of every curve's minimum and maximum. The result has
// at most `max_points` indices when max_points >= 2 + keep.size() + 2 * curves.size(); with
// n <= max_points it is every index. Each curve's global maximum is always kept.
std::vector<std::size_t> downsample_indices(std::size_t n, std::span<const std::span<const std::int64_t>> curves,
                                            std::size_t max_points, std::span<const std::size_t> keep = {});

// The values of `curve` at `indices`.
std::vector<std::int64_t> take(std::span<const std::int64_t> curve, std::span<const std::size_t> indices);

}  // namespace memsnap
