// Pinned host memory (host_segments, host_traces; PyTorch 2026 with
// _record_memory_history(record_pinned_host_memory=True)): totals of the host segments, the
// sites of the live host blocks, and the peak of live host memory over the host trace, apart
// from every device's numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "analysis/attribution.h"
#include "analysis/totals.h"
#include "model/snapshot.h"

namespace memsnap {

struct HostMemoryReport {
  bool present = false;  // the file has host_segments or host_traces
  Totals totals;         // of host_segments (no peaks)
  std::vector<Site> sites;  // live host blocks, largest first
  std::uint64_t events = 0;  // host trace entries
  std::optional<std::uint64_t> peak_live;  // live requested bytes at the host trace's peak
  std::size_t peak_index = 0;              // the peak is the state after this many host events
};

HostMemoryReport analyze_host_memory(const Snapshot& snapshot);

}  // namespace memsnap
