// Replaying device_traces: the live-bytes and reserved curves (anchored at the final state), the
// peaks and what was live then, alloc/free pairing, frees still pending, and step boundaries
// from annotations.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_names.h"
#include "analysis/attribution.h"
#include "analysis/live_curve.h"
#include "model/event_pairing.h"
#include "model/snapshot.h"

namespace memsnap {

// A mark's name and stage view text that the timeline's annotation_text owns: an annotation for
// every device (device -1) is one copy of its text shared by all the timelines, not one a device.
struct StepMark {
  std::string_view name;   // e.g. "ProfilerStep#3" or "Optimizer.step#AdamW.step"
  std::string_view stage;  // START / END
  std::int64_t time_us = 0;
  std::size_t event_index = 0;  // events before this mark
  std::int64_t live_bytes = 0;  // live requested bytes at the mark
};

// The stack a live block is attributed to: the one that allocated it (the alloc event's, or the
// final block's for a block still live that the window never allocated). A block allocated before
// the window and freed in it has none: its free stack says where it died, not what it is.
inline StackId allocating_stack(const Lifetime& l) { return l.stack; }

// Where a lifetime's block came from: its alloc is in the window, or it is older.
inline Provenance provenance_of(const Lifetime& l) {
  return l.alloc == kBeforeWindow ? Provenance::BeforeWindow : Provenance::InWindow;
}

struct DeviceTimeline {
  std::int64_t device = 0;
  std::size_t events = 0;
  std::optional<std::int64_t> peak_allocated;
  std::optional<std::int64_t> peak_reserved;  // from segment events, backwards from the final reserved bytes
  bool reserved_peak_at_window_start = false;  // reached only before the window's first segment event
  bool times_ascending = true;      // every kept event has a time and times never go backwards
  std::size_t peak_index = 0;       // the peak is the state after the first peak_index events
  std::int64_t peak_time_us = 0;    // time of the event that reached it (0 if unknown)
  std::int64_t end_live = 0;
  std::vector<LiveItem> live_at_peak;
  std::vector<std::size_t> lifetimes_at_peak;  // the lifetimes (indices into `lifetimes`) live at the peak, ascending
  std::array<std::uint64_t, kActionCount> actions{};  // kept events per action
  std::vector<std::size_t> oom_events;                // indices of the oom events
  // The oom events studied one by one (live set, layout, sites): positions in oom_events, all of
  // them or, on a device with more than kStudiedOomsPerDevice, the first and the last half of that.
  std::vector<std::size_t> studied_ooms;
  // Per studied oom event, the lifetimes (indices into `lifetimes`) live just before it.
  std::vector<std::vector<std::size_t>> live_at_oom;
  std::uint64_t matched_frees = 0;          // alloc ... free_completed pairs inside the window
  std::uint64_t frees_before_window = 0;    // free_completed of memory allocated before the window
  std::uint64_t bytes_freed_before_window = 0;
  std::uint64_t live_from_before_window = 0;  // live blocks at the end with no alloc in the window
  std::uint64_t pending_requests = 0;       // free_requested never completed
  std::uint64_t pending_bytes = 0;
  std::vector<std::int64_t> pending_streams;  // streams of the pending requests (unique)
  std::vector<StepMark> steps;
  // The text `steps` views (names and stages of the snapshot's annotations), shared by the timelines.
  std::shared_ptr<const std::vector<std::string>> annotation_text;
  // Live requested bytes after each event (size events + 1): curve[0] is the window's start.
  LiveCurve curve;
  // Every allocation the window saw, in event order, then the blocks live at the end that the
  // window never allocated. Built in one pass with the free pairing above.
  Lifetimes lifetimes;
  // For the lifetimes still live at the end that the final state holds: (lifetime, index in
  // Snapshot::blocks), by lifetime.
  std::vector<std::pair<std::size_t, std::size_t>> final_blocks;
  FreeBursts free_bursts;
  std::vector<std::size_t> segment_events;  // indices of segment_alloc/free/map/unmap events
  // The reserved-bytes curve, stored where it changes (8 bytes a segment event, not an event):
  // reserved_start before the first event, reserved_after[i] after segment_events[i]. Walked
  // backwards from the final segments' bytes (held at INT64_MAX); see reserved_at().
  std::int64_t reserved_start = 0;
  std::vector<std::int64_t> reserved_after;
  std::size_t reserved_peak_index = 0;  // the first state holding peak_reserved
};

// Each studied OOM costs its live set (sorted into a layout, attributed to sites, budgeted), and a
// trace that retries after OOMs can hold hundreds whose live sets grow one after another: a device
// studies its first and its last kStudiedOomsPerDevice / 2 one by one and counts the rest.
inline constexpr std::size_t kStudiedOomsPerDevice = 32;
// The positions in oom_events studied (ascending): every one, or the first and the last half of kStudied.
std::vector<std::size_t> studied_oom_positions(std::size_t oom_count);
// The event index of studied OOM i.
inline std::size_t studied_oom_event(const DeviceTimeline& t, std::size_t i) { return t.oom_events[t.studied_ooms[i]]; }
// The event indices of every studied OOM, ascending.
std::vector<std::size_t> studied_oom_events(const DeviceTimeline& t);

std::vector<DeviceTimeline> build_timelines(const Snapshot& snapshot);

// The live curve and its peak (curve, peak_index, peak_allocated, peak_time_us) from the sums
// measured while the events were read, anchored at t.end_live; false, with t untouched, when a
// value might not fit in 64 bits (build_timelines then walks the events backwards).
bool fill_curve_from_sums(DeviceTimeline& t, const TraceEvents& events, const LiveSums& sums);

// What the window can say about the run's peak: a peak inside the window; the largest live total
// at the window's very start of a trace that began mid-run (the run's peak may have come before
// the recording: a lower bound); or no allocation in the window at all (a legacy
// `_record_memory_history(True)` ring of one entry, say), too short to show a peak; a device with
// nothing live in the window is InWindow (its peak, 0, is known).
enum class PeakCertainty { InWindow, AtWindowStart, TooShort };
template <>
struct EnumNames<PeakCertainty> {
  static constexpr std::array<std::string_view, 3> names = {"in_window", "at_window_start", "too_short"};
};
PeakCertainty peak_certainty(const DeviceTimeline& timeline);
inline const char* peak_certainty_name(PeakCertainty certainty) { return name_of(certainty).data(); }

// Indices into timeline.lifetimes of the allocations live just before each kept event index in
// `ascending` (sorted), in one pass over the lifetimes.
std::vector<std::vector<std::size_t>> live_lifetimes(const DeviceTimeline& timeline, const std::vector<std::size_t>& ascending);

// Reserved bytes in the state after the first k events (k <= events).
std::int64_t reserved_at(const DeviceTimeline& timeline, std::size_t k);
// reserved_at(k) for ascending k in 0 .. events, in constant time each (for plots: no array of
// 8 bytes an event); going back restarts from the first segment event.
class ReservedCurveReader {
 public:
  explicit ReservedCurveReader(const DeviceTimeline& timeline) : t_(timeline) {}
  std::int64_t at(std::size_t k);

 private:
  const DeviceTimeline& t_;
  std::size_t applied_ = 0;  // segment events before the last k read (their index < k)
  std::size_t last_ = 0;
};

// The final block of a lifetime still live at the end; null when the final state lacks it.
const Block* final_block_of(const Snapshot& snapshot, const DeviceTimeline& timeline, std::size_t lifetime);

// The allocations of the given lifetimes as items to attribute (trace sizes, allocating_stack(),
// provenance_of()).
std::vector<LiveItem> live_items(const DeviceTimeline& timeline, const std::vector<std::size_t>& lifetimes);

// The live (active_allocated) blocks of the final state (of one device, or all with -1) with their
// provenance: in the window when the replay paired them with an alloc, before it when the device
// has a trace that never allocated them, no_trace when the device has no trace.
std::vector<LiveItem> final_live_items(const Snapshot& snapshot, const std::vector<DeviceTimeline>& timelines,
                                       std::int64_t device = -1);

}  // namespace memsnap
