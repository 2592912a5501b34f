// The phase bands of the HTML timeline chart: one band a phase span (forward, backward,
// optimizer step, zero_grad, evaluation) of a device, at most kMaxPhaseBands of them, with the
// x position of its first and last event as the chart places events (index, and time when timed).
#pragma once

#include <cstddef>
#include <functional>

#include <nlohmann/json.hpp>

#include "analysis/phases.h"

namespace memsnap {

inline constexpr std::size_t kMaxPhaseBands = 400;

// `marker(k)` is the chart's x position object of event k. Spans of phase `other` are skipped.
nlohmann::ordered_json phase_bands_json(const DevicePhases& phases, const std::function<nlohmann::ordered_json(std::size_t)>& marker);

}  // namespace memsnap
