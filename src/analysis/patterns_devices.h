// device_imbalance: the devices of one snapshot (one process driving several GPUs) differ widely
// in peak or live memory; the code path that spreads the model (DataParallel, pipeline stages,
// placement by hand) and the sites that explain the difference.
#pragma once

#include <optional>

#include "analysis/analyze.h"

namespace memsnap {

// Devices differ widely: the heaviest's peak (live memory without a trace) is more than 1.5x the
// lightest's and more than 1 GiB above it.
std::optional<Pattern> device_imbalance(const Snapshot& snapshot, const Measured& measured);

}  // namespace memsnap
