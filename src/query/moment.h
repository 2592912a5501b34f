// The moment a query looks at: the end, a trace event, a time, a step boundary, an annotation,
// the peak or an OOM, resolved to one device's state after its first `index` kept events.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/timeline.h"
#include "model/snapshot.h"

namespace memsnap {

enum class MomentKind { End, Event, Time, Step, Annotation, Peak, Oom };

struct MomentSpec {
  MomentKind kind = MomentKind::End;
  std::uint64_t number = 0;  // --event N, --step K, --oom I
  std::int64_t time_us = 0;  // --time: absolute, or relative to the first event when `relative`
  bool relative = false;
  std::string annotation;    // --annotation NAME (without #i)
  std::size_t occurrence = 0;  // the #i of --annotation NAME#i (0: the first)
};

// "1.5s", "200ms", "300us" (since the first event) or "1712345678901234" (an absolute time_us);
// nullopt when it is neither.
std::optional<MomentSpec> parse_time_spec(std::string_view text);

// "NAME" or "NAME#i"; a name that itself ends in #digits (ProfilerStep#3) is matched whole first.
MomentSpec annotation_spec(std::string_view text);

struct Moment {
  MomentKind kind = MomentKind::End;
  std::int64_t device = 0;
  std::size_t index = 0;            // the state after the first `index` kept events of the device
  std::size_t events = 0;           // kept events of the device
  std::optional<std::int64_t> time_us;  // of the event that reached the state (when recorded)
  std::string description;          // "after event 41 (alloc)", "just before OOM 0", ...
  const DeviceTimeline* timeline = nullptr;  // null: no trace, the final state
};

// Resolves `spec` on `device` (default: the OOM's device for --oom, else the device with the
// highest peak, else the first device holding segments). Throws InputError when the snapshot
// has no such moment, saying which ones it has.
Moment resolve_moment(const Snapshot& snapshot, const std::vector<DeviceTimeline>& timelines, const MomentSpec& spec,
                      std::optional<std::int64_t> device);

}  // namespace memsnap
