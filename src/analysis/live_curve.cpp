// LiveCurve lookups: a stored checkpoint plus the deltas of at most kStride - 1 events.
#include "analysis/live_curve.h"

namespace memsnap {

std::int64_t LiveCurve::operator[](std::size_t k) const {
  std::int64_t value = checkpoints_[k / kStride];
  for (std::size_t i = k / kStride * kStride; i < k; ++i) value = add_live_delta(value, live_delta(events_[i]));
  return value;
}

std::vector<std::int64_t> LiveCurve::materialize() const {
  std::vector<std::int64_t> out(size());
  if (out.empty()) return out;
  out[0] = checkpoints_[0];
  for (std::size_t k = 1; k < out.size(); ++k) out[k] = add_live_delta(out[k - 1], live_delta(events_[k - 1]));
  return out;
}

}  // namespace memsnap
