// LiveCurve lookups: a stored checkpoint plus the deltas of at most kStride - 1 events.
#include "analysis/live_curve.h"

#include <algorithm>

namespace memsnap {

std::int64_t LiveCurve::operator[](std::size_t k) const {
  std::int64_t value = checkpoints_[k / kStride];
  for (std::size_t i = k / kStride * kStride; i < k; ++i) value = add_live_delta(value, live_delta(events_[i]));
  return value;
}

std::int64_t LiveCurve::max_between(std::size_t from, std::size_t to) const {
  std::int64_t value = (*this)[from];
  std::int64_t high = value;
  std::size_t k = from;  // value is the point at k
  auto step = [&] {
    value = add_live_delta(value, live_delta(events_[k++]));
    high = std::max(high, value);
  };
  while (k < to && k % kStride != 0) step();
  if (k + kStride <= to) {
    for (; k + kStride <= to; k += kStride) high = std::max(high, block_max_[k / kStride]);
    value = checkpoints_[k / kStride];
  }
  while (k < to) step();
  return high;
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
