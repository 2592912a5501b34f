// What the trace window holds: event and action counts, drops, unmatched free requests, OOMs.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "model/snapshot.h"

namespace memsnap {

struct OomEvent {
  std::int64_t device = 0;
  std::uint64_t size = 0;         // rounded request
  std::uint64_t device_free = 0;  // cudaMemGetInfo free bytes
  std::int64_t stream = 0;
  std::int64_t time_us = 0;
  StackId stack = kNoStack;
  std::size_t index = 0;  // position in the device's kept events
  PoolId pool;            // the entry's pool_id (default pool when the file names none)
};

struct TraceSummary {
  std::uint64_t events = 0;    // entries in the file
  std::uint64_t analyzed = 0;  // kept (newest max_trace_events per device)
  std::uint64_t dropped = 0;
  std::array<std::uint64_t, kActionCount> actions{};
  std::uint64_t pending_free_requests = 0;  // free_requested never followed by free_completed (set by analyze)
  std::vector<OomEvent> ooms;
  bool has_history = false;  // any trace event kept
};

struct DeviceTimeline;

// From the snapshot's traces and their timelines (build_timelines): OOMs by device, then in
// event order.
TraceSummary summarize_trace(const Snapshot& snapshot, const std::vector<DeviceTimeline>& timelines);

}  // namespace memsnap
