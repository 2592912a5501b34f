// LiveCurve lookups: a stored checkpoint plus the deltas of at most kStride - 1 events.
#include "analysis/live_curve.h"

namespace memsnap {

std::int64_t LiveCurve::operator[](std::size_t k) const {
  std::int64_t value = checkpoints_[k / kStride];
  for (std::size_t i = k / kStride * kStride; i < k; ++i) value = add_live_delta(value, live_delta(events_[i]));
  return value;
}

LiveCurve::Extremes LiveCurve::extremes(std::size_t from, std::size_t to) const {
  Extremes e;
  std::int64_t value = (*this)[from];
  e.lo = e.hi = from;
  e.low = e.high = value;
  std::size_t p = from;  // value is the point at p
  auto step = [&] {
    value = add_live_delta(value, live_delta(events_[p++]));
    if (value < e.low) e.lo = p, e.low = value;
    if (value > e.high) e.hi = p, e.high = value;
  };
  while (p + 1 < to && p % kStride != 0) step();
  // Whole blocks (block p / kStride holds the points p + 1 .. p + kStride): the first block of
  // the highest maximum above what came before, and of the lowest minimum.
  std::size_t high_block = SIZE_MAX, low_block = SIZE_MAX;
  std::int64_t high = e.high, low = e.low;
  if (p + kStride < to) {
    for (; p + kStride < to; p += kStride) {
      const std::size_t b = p / kStride;
      if (block_max_[b] > high) high_block = b, high = block_max_[b];
      if (block_min_[b] < low) low_block = b, low = block_min_[b];
    }
    value = checkpoints_[p / kStride];
  }
  // The first point of block b that holds `target`.
  auto first_point = [&](std::size_t b, std::int64_t target) {
    std::int64_t v = checkpoints_[b];
    std::size_t k = b * kStride;
    do v = add_live_delta(v, live_delta(events_[k++]));
    while (v != target);
    return k;
  };
  if (high_block != SIZE_MAX) e.hi = first_point(high_block, high), e.high = high;
  if (low_block != SIZE_MAX) e.lo = first_point(low_block, low), e.low = low;
  while (p + 1 < to) step();
  return e;
}

std::int64_t LiveCurve::Reader::at(std::size_t k) {
  if (!started_ || k < next_ || k - next_ >= kStride) {
    next_ = k / kStride * kStride;
    value_ = curve_.checkpoints_[k / kStride];
    started_ = true;
  }
  for (; next_ < k; ++next_) value_ = add_live_delta(value_, live_delta(curve_.events_[next_]));
  return value_;
}

}  // namespace memsnap
