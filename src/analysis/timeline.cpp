// Timeline replay per device. The curve is anchored at the end (requested bytes of active and
// pending blocks), so memory allocated before the window is counted: taken from the live sums
// the reader measured when it can, walked backwards otherwise.
#include "analysis/timeline.h"
#include "base/address_map.h"
#include "base/parallel.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <set>

namespace memsnap {

// The curve and its peak from the sums measured while the events were read: the value after k
// events is offset + sum_k, with offset = end_live - total. Where every sum and the offset fit
// in 64 bits so do all the values, so they are the backward walk's exactly (the same peak, the
// latest of equal maxima); otherwise false, and the walk runs.
bool fill_curve_from_sums(DeviceTimeline& t, const TraceEvents& events, const LiveSums& sums) {
  std::int64_t offset, peak, lowest;
  if (!sums.exact || sums.checkpoints.size() != events.size() / LiveCurve::kStride + 1 ||
      sums.block_max.size() != (events.size() + LiveCurve::kStride - 1) / LiveCurve::kStride || sums.block_min.size() != sums.block_max.size() ||
      __builtin_sub_overflow(t.end_live, sums.total, &offset) || __builtin_add_overflow(offset, sums.max, &peak) ||
      __builtin_add_overflow(offset, sums.min, &lowest)) {
    return false;
  }
  // Every sum lies between min and max, so no point of the curve leaves 64 bits.
  std::vector<std::int64_t> checkpoints(sums.checkpoints.size()), block_max(sums.block_max.size()), block_min(sums.block_min.size());
  for (std::size_t i = 0; i < checkpoints.size(); ++i) checkpoints[i] = offset + sums.checkpoints[i];
  for (std::size_t i = 0; i < block_max.size(); ++i) block_max[i] = offset + sums.block_max[i];
  for (std::size_t i = 0; i < block_min.size(); ++i) block_min[i] = offset + sums.block_min[i];
  t.curve = LiveCurve(events, std::move(checkpoints), std::move(block_max), std::move(block_min));
  t.peak_index = sums.max_index;
  t.peak_allocated = peak;
  if (t.peak_index > 0 && events[t.peak_index - 1].has_time) t.peak_time_us = events[t.peak_index - 1].time_us;
  return true;
}

namespace {

// Requested bytes of the blocks live at the end (active or pending free) on `device`.
// total + bytes, held at INT64_MAX instead of overflowing (absurd sizes are flagged by plausibility).
std::int64_t add_clamped(std::int64_t total, std::uint64_t bytes) {
  constexpr std::uint64_t kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  const std::uint64_t t = static_cast<std::uint64_t>(total);
  return static_cast<std::int64_t>(bytes >= kMax - t ? kMax : t + bytes);
}

std::int64_t end_live_bytes(const Snapshot& s, std::int64_t device) {
  std::int64_t live = 0;
  s.for_each_live_block(device, [&](const Block& b) { live = add_clamped(live, b.requested_size); });
  return live;
}

// Reserved bytes a segment event adds (wrapping negative for frees and unmaps).
std::uint64_t reserved_delta(const TraceEvent& e) {
  if (e.action == Action::SegmentAlloc || e.action == Action::SegmentMap) return e.size;
  if (e.action == Action::SegmentFree || e.action == Action::SegmentUnmap) return 0 - e.size;
  return 0;
}

// Backwards from the final state: the live-bytes curve and its peak.
void fill_curve(DeviceTimeline& t, const TraceEvents& events, const LiveSums* sums) {
  if (sums && fill_curve_from_sums(t, events, *sums)) return;
  std::size_t best = events.size();
  std::int64_t peak = t.end_live;
  t.curve = LiveCurve(events, t.end_live, [&](std::size_t k, std::int64_t value) {
    if (value > peak) {  // the latest of equal maxima, as a backward scan finds it
      peak = value;
      best = k;
    }
  });
  t.peak_index = best;
  t.peak_allocated = peak;
  if (best > 0 && events[best - 1].has_time) t.peak_time_us = events[best - 1].time_us;
}

// Backwards from the final reserved bytes through the segment events (after pair_events): the
// reserved curve's steps, its peak and the first state that holds it.
void fill_reserved(DeviceTimeline& t, const TraceEvents& events, std::int64_t end_reserved) {
  const std::size_t n = t.segment_events.size();
  t.reserved_after.resize(n);
  std::int64_t reserved = end_reserved;
  std::int64_t later = reserved;  // the largest reserved after the window's first segment event
  for (std::size_t k = n; k-- > 0;) {
    t.reserved_after[k] = reserved;
    later = std::max(later, reserved);
    reserved = subtract_live_delta(reserved, reserved_delta(events[t.segment_events[k]]));
  }
  t.reserved_start = reserved;
  t.peak_reserved = std::max(later, reserved);
  t.reserved_peak_at_window_start = reserved > later;
  t.reserved_peak_index = 0;
  if (reserved >= later) return;
  for (std::size_t k = 0; k < n; ++k) {
    if (t.reserved_after[k] == later) {
      t.reserved_peak_index = t.segment_events[k] + 1;
      return;
    }
  }
}

// The events' pairing (made while they were read, or here when it was not) into the timeline, then
// the blocks live at the end that the window never allocated and the free_requested still pending.
// `ready` may be read by fill_curve meanwhile: only the fields it does not read are moved.
void pair_events(DeviceTimeline& t, const Snapshot& s, const TraceEvents& events, EventPairs* ready) {
  EventPairs own;
  if (!ready) own = pair_all(events);
  EventPairs& p = ready ? *ready : own;
  t.actions = p.actions;
  t.times_ascending = p.times_ascending;
  t.matched_frees = p.matched_frees;
  t.frees_before_window = p.frees_before_window;
  t.bytes_freed_before_window = p.bytes_freed_before_window;
  t.lifetimes = std::move(p.lifetimes);
  t.free_bursts = std::move(p.free_bursts);
  t.segment_events = std::move(p.segment_events);
  t.oom_events = std::move(p.oom_events);
  auto& lifetimes = t.lifetimes;
  const auto& open = p.open;
  // Blocks live at the end that the window never allocated, in segment order.
  s.for_each_live_block(t.device, [&](const Block& b) {
    const auto block = static_cast<std::size_t>(&b - s.blocks.data());
    if (auto it = open.find(b.address); it != open.end()) {
      t.final_blocks.emplace_back(it->second.lifetime, block);
      return;
    }
    t.final_blocks.emplace_back(lifetimes.size(), block);
    lifetimes.push_back({kBeforeWindow, kStillLive, b.requested_size, b.stack, kNoStack});
    ++t.live_from_before_window;
  });
  std::sort(t.final_blocks.begin(), t.final_blocks.end());
  std::set<std::int64_t> streams;
  auto pending = [&](std::size_t request) {
    const TraceEvent& e = events[request];
    ++t.pending_requests;
    t.pending_bytes += e.size;
    streams.insert(s.stream(e));
  };
  for (const auto& [addr, o] : open) {
    if (o.requested) pending(o.requested - 1);
  }
  for (const auto& [addr, request] : p.orphan_requests) pending(request);
  t.pending_streams.assign(streams.begin(), streams.end());
}

// One pass over the lifetimes for the live sets at the peak and before each studied OOM.
void find_live_at_peak_and_ooms(DeviceTimeline& t) {
  t.studied_ooms = studied_oom_positions(t.oom_events.size());
  std::vector<std::size_t> moments = studied_oom_events(t);  // ascending
  const auto at = moments.insert(std::upper_bound(moments.begin(), moments.end(), t.peak_index), t.peak_index);
  const auto peak = static_cast<std::size_t>(at - moments.begin());
  auto live = live_lifetimes(t, moments);
  t.live_at_peak = live_items(t, live[peak]);
  t.lifetimes_at_peak = std::move(live[peak]);
  live.erase(live.begin() + static_cast<std::ptrdiff_t>(peak));
  t.live_at_oom = std::move(live);
}

// The snapshot's annotations indexed once: their text (name, stage, name, stage, ...) copied once
// for all the timelines, and their indices by device, in file order.
struct AnnotationIndex {
  std::shared_ptr<const std::vector<std::string>> text;
  std::vector<std::size_t> every_device;                       // device -1
  std::map<std::int64_t, std::vector<std::size_t>> by_device;  // one device's own
};

AnnotationIndex index_annotations(const Snapshot& s) {
  AnnotationIndex index;
  auto text = std::make_shared<std::vector<std::string>>();
  text->reserve(2 * s.annotations.size());
  for (std::size_t i = 0; i < s.annotations.size(); ++i) {
    const Annotation& a = s.annotations[i];
    text->push_back(a.name);
    text->push_back(a.stage);
    (a.device == -1 ? index.every_device : index.by_device[a.device]).push_back(i);
  }
  index.text = std::move(text);
  return index;
}

// The device's marks: its own annotations and those for every device, in file order.
void mark_steps(DeviceTimeline& t, const Snapshot& s, const TraceEvents& events, const AnnotationIndex& index) {
  static const std::vector<std::size_t> kNone;
  const auto own_it = index.by_device.find(t.device);
  const std::vector<std::size_t>& own = own_it == index.by_device.end() ? kNone : own_it->second;
  std::vector<std::size_t> mine;
  mine.reserve(own.size() + index.every_device.size());
  std::merge(own.begin(), own.end(), index.every_device.begin(), index.every_device.end(), std::back_inserter(mine));
  const std::vector<std::string>& text = *index.text;
  t.annotation_text = index.text;
  t.steps.reserve(mine.size());
  for (std::size_t i : mine) {
    const Annotation& a = s.annotations[i];
    const auto it = std::lower_bound(events.begin(), events.end(), a.time_us,
                                     [](const TraceEvent& e, std::int64_t time) { return e.time_us < time; });
    StepMark m{text[2 * i], text[2 * i + 1], a.time_us, static_cast<std::size_t>(it - events.begin()), 0};
    m.live_bytes = t.curve[m.event_index];
    t.steps.push_back(m);
  }
}

}  // namespace

std::vector<std::size_t> studied_oom_positions(std::size_t oom_count) {
  std::vector<std::size_t> out;
  constexpr std::size_t kHalf = kStudiedOomsPerDevice / 2;
  for (std::size_t i = 0; i < oom_count; ++i) {
    if (oom_count <= kStudiedOomsPerDevice || i < kHalf || i >= oom_count - kHalf) out.push_back(i);
  }
  return out;
}

std::vector<std::size_t> studied_oom_events(const DeviceTimeline& t) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < t.studied_ooms.size(); ++i) out.push_back(studied_oom_event(t, i));
  return out;
}

namespace {

// The lifetimes [begin, end) live at each of `indices`, appended to `out` (one list per index).
void live_lifetimes_in(const DeviceTimeline& t, const std::vector<std::size_t>& indices, std::size_t begin, std::size_t end,
                       std::vector<std::vector<std::size_t>>& out) {
  out.resize(indices.size());
  for (std::size_t k = begin; k < end; ++k) {
    const Lifetime& l = t.lifetimes[k];
    // Live in the states alloc+1 .. free.
    const std::size_t from = l.alloc == kBeforeWindow ? 0 : std::size_t{l.alloc} + 1;
    auto it = std::lower_bound(indices.begin(), indices.end(), from);
    for (; it != indices.end() && (l.free == kStillLive || *it <= l.free); ++it) {
      out[static_cast<std::size_t>(it - indices.begin())].push_back(k);
    }
  }
}

// Below this many lifetimes one core walks them all.
constexpr std::size_t kMinSplitLifetimes = std::size_t(1) << 16;

}  // namespace

std::vector<std::vector<std::size_t>> live_lifetimes(const DeviceTimeline& t, const std::vector<std::size_t>& indices) {
  std::vector<std::vector<std::size_t>> out(indices.size());
  if (indices.empty()) return out;
  // The two halves of the lifetimes on two cores (5.6 million on the 1 GB Python-only input), each
  // list the first half's then the second's: the order of one walk.
  const std::size_t n = t.lifetimes.size();
  if (n < kMinSplitLifetimes || worker_count() < 2) {
    live_lifetimes_in(t, indices, 0, n, out);
    return out;
  }
  std::vector<std::vector<std::size_t>> second;
  parallel_for(2, [&](std::size_t half) {
    if (half == 0) live_lifetimes_in(t, indices, 0, n / 2, out);
    else live_lifetimes_in(t, indices, n / 2, n, second);
  });
  for (std::size_t i = 0; i < out.size(); ++i) out[i].insert(out[i].end(), second[i].begin(), second[i].end());
  return out;
}

std::int64_t reserved_at(const DeviceTimeline& t, std::size_t k) {
  // The segment events before state k are those with an index below k.
  const auto steps = std::lower_bound(t.segment_events.begin(), t.segment_events.end(), k) - t.segment_events.begin();
  return steps == 0 ? t.reserved_start : t.reserved_after[static_cast<std::size_t>(steps) - 1];
}

std::int64_t ReservedCurveReader::at(std::size_t k) {
  if (k < last_) applied_ = 0;
  last_ = k;
  // After k events, every segment event before k has changed the reserved bytes.
  while (applied_ < t_.segment_events.size() && t_.segment_events[applied_] < k) ++applied_;
  return applied_ == 0 ? t_.reserved_start : t_.reserved_after[applied_ - 1];
}

const Block* final_block_of(const Snapshot& s, const DeviceTimeline& t, std::size_t lifetime) {
  const auto it = std::lower_bound(t.final_blocks.begin(), t.final_blocks.end(), std::make_pair(lifetime, std::size_t{0}));
  if (it == t.final_blocks.end() || it->first != lifetime || it->second >= s.blocks.size()) return nullptr;
  return &s.blocks[it->second];
}

std::vector<LiveItem> live_items(const DeviceTimeline& t, const std::vector<std::size_t>& lifetimes) {
  std::vector<LiveItem> out;
  out.reserve(lifetimes.size());
  for (std::size_t k : lifetimes) {
    const Lifetime& l = t.lifetimes[k];
    out.push_back({allocating_stack(l), l.size, l.size, provenance_of(l), t.device, l.free == kStillLive ? kNoStack : l.free_stack});
  }
  return out;
}

std::vector<LiveItem> final_live_items(const Snapshot& s, const std::vector<DeviceTimeline>& timelines, std::int64_t device) {
  // Per block: 0 no trace on its device, 1 traced and allocated before the window, 2 allocated in it.
  std::vector<std::uint8_t> seen(s.blocks.size(), 0);
  std::set<std::int64_t> traced;
  for (const DeviceTimeline& t : timelines) {
    traced.insert(t.device);
    for (const auto& [lifetime, block] : t.final_blocks) {
      if (block < seen.size()) seen[block] = t.lifetimes[lifetime].alloc == kBeforeWindow ? 1 : 2;
    }
  }
  // The active blocks of the device's segments (all devices' for -1), with their index in s.blocks.
  const auto for_each_live = [&](auto&& fn) {
    for (const Segment& seg : s.segments) {
      if (device >= 0 && seg.device != device) continue;
      for (std::uint32_t i = 0; i < seg.block_count && seg.first_block + i < s.blocks.size(); ++i) {
        if (s.blocks[seg.first_block + i].state == BlockState::ActiveAllocated) fn(seg, seg.first_block + i);
      }
    }
  };
  // Sized before it is filled: a 1 GB snapshot's final state holds 300,000 blocks, and a vector
  // grown by doubling first-touches twice its bytes (fresh memory is what a VM charges for).
  std::size_t live = 0;
  for_each_live([&](const Segment&, std::size_t) { ++live; });
  std::vector<LiveItem> items;
  items.reserve(live);
  for_each_live([&](const Segment& seg, std::size_t k) {
    const Block& b = s.blocks[k];
    const Provenance p = !traced.contains(seg.device) ? Provenance::NoTrace : seen[k] == 2 ? Provenance::InWindow : Provenance::BeforeWindow;
    items.push_back({b.stack, b.size, b.requested_size, p, seg.device});
  });
  return items;
}

// Per device, the curve and the pairing are independent passes: they run side by side, the
// longer pairings first.
std::vector<DeviceTimeline> build_timelines(const Snapshot& s) {
  std::vector<DeviceTimeline> out;
  for (std::size_t d = 0; d < s.device_traces.size(); ++d) {
    if (s.device_traces[d].events.empty()) continue;
    DeviceTimeline& t = out.emplace_back();
    t.device = static_cast<std::int64_t>(d);
    t.events = s.device_traces[d].events.size();
    t.end_live = end_live_bytes(s, t.device);
  }
  std::map<std::int64_t, std::int64_t> reserved;  // device -> bytes of its final segments
  for (const Segment& seg : s.segments) reserved[seg.device] = add_clamped(reserved[seg.device], seg.total_size);
  std::vector<std::int64_t> end_reserved(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) end_reserved[i] = reserved[out[i].device];
  // The pairing and the live sums made while the events were read, where they match the events.
  std::vector<std::unique_ptr<EventPairs>> ready(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    ready[i] = s.device_traces[static_cast<std::size_t>(out[i].device)].pairs.take();
    if (ready[i] && ready[i]->events != s.events_of(out[i].device).size()) ready[i].reset();
  }
  parallel_for(out.size() * 2, [&](std::size_t i) {
    if (i < out.size()) return pair_events(out[i], s, s.events_of(out[i].device), ready[i].get());
    const std::size_t d = i - out.size();
    fill_curve(out[d], s.events_of(out[d].device), ready[d] ? &ready[d]->live : nullptr);
  });
  ready.clear();
  const AnnotationIndex annotations = index_annotations(s);
  parallel_for(out.size(), [&](std::size_t i) {
    DeviceTimeline& t = out[i];
    fill_reserved(t, s.events_of(t.device), end_reserved[i]);
    mark_steps(t, s, s.events_of(t.device), annotations);
    find_live_at_peak_and_ooms(t);
  });
  return out;
}

PeakCertainty peak_certainty(const DeviceTimeline& t) {
  const bool nothing_live = !t.peak_allocated || *t.peak_allocated <= 0;
  if (t.actions[static_cast<std::size_t>(Action::Alloc)] == 0 && !nothing_live) return PeakCertainty::TooShort;
  const bool started_mid_run = t.live_from_before_window > 0 || t.frees_before_window > 0;
  if (t.peak_index == 0 && started_mid_run) return PeakCertainty::AtWindowStart;
  return PeakCertainty::InWindow;
}

}  // namespace memsnap
