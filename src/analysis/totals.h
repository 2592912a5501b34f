// Allocator-level totals (reserved, allocated, pending free, inactive, requested, peaks) overall
// and per device, as defined in the report contract.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/snapshot.h"

namespace memsnap {

struct Totals {
  std::uint64_t reserved = 0;
  std::uint64_t allocated = 0;
  std::uint64_t pending_free = 0;
  std::uint64_t inactive = 0;
  std::uint64_t requested = 0;
  std::uint64_t segments = 0;
  std::uint64_t blocks = 0;
  std::uint64_t largest_inactive_block = 0;
  std::optional<std::int64_t> peak_allocated;  // null without trace history
  std::optional<std::int64_t> peak_reserved;
};

struct DeviceTotals {
  std::int64_t device = 0;
  Totals totals;
};

struct TotalsReport {
  Totals overall;
  std::vector<DeviceTotals> devices;  // devices with segments or trace events, ascending
};

TotalsReport compute_totals(const Snapshot& snapshot);

// Peak of live requested bytes over the trace window, reconstructed backwards from
// `end_live` (sum of requested_size of active blocks at the end). Null when `trace` is empty.
std::optional<std::int64_t> peak_allocated(const DeviceTrace& trace, std::int64_t end_live);
// Peak reserved bytes over the window, from segment events, backwards from `end_reserved`.
std::optional<std::int64_t> peak_reserved(const DeviceTrace& trace, std::int64_t end_reserved);

}  // namespace memsnap
