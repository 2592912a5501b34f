// Timeline replay per device. The curve is anchored at the end (requested bytes of active and
// pending blocks) and walked backwards, so memory allocated before the window is counted.
#include "analysis/timeline.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace memsnap {
namespace {

std::int64_t delta(const TraceEvent& e) {
  if (e.action == Action::Alloc) return static_cast<std::int64_t>(e.size);
  if (e.action == Action::FreeCompleted) return -static_cast<std::int64_t>(e.size);
  return 0;
}

struct EndState {
  std::int64_t live = 0;
  std::unordered_map<std::uint64_t, LiveItem> blocks;  // address -> live block (requested bytes)
};

EndState end_state(const Snapshot& s, std::int64_t device) {
  EndState st;
  for (const Segment& seg : s.segments) {
    if (seg.device != device) continue;
    for (std::uint32_t i = 0; i < seg.block_count; ++i) {
      const Block& b = s.blocks[seg.first_block + i];
      if (b.state != BlockState::ActiveAllocated && b.state != BlockState::ActivePendingFree) continue;
      st.live += static_cast<std::int64_t>(b.requested_size);
      st.blocks[b.address] = {b.stack, b.requested_size, b.requested_size};
    }
  }
  return st;
}

void fill_curve(DeviceTimeline& t, const std::vector<TraceEvent>& events) {
  t.curve.assign(events.size() + 1, 0);
  t.curve[events.size()] = t.end_live;
  for (std::size_t k = events.size(); k-- > 0;) t.curve[k] = t.curve[k + 1] - delta(events[k]);
  std::size_t best = events.size();
  for (std::size_t k = events.size() + 1; k-- > 0;) {
    if (t.curve[k] > t.curve[best]) best = k;
  }
  t.peak_index = best;
  t.peak_allocated = t.curve[best];
  if (best > 0 && events[best - 1].has_time) t.peak_time_us = events[best - 1].time_us;
}

// The live set after the first `index` events: the final set with later events undone.
// The stack that allocated the memory each free_completed at index >= `from` releases: the
// matching alloc's stack when it is in the window (with context="all" a free carries the stack
// of the free itself), else the free's own stack.
std::unordered_map<std::size_t, StackId> alloc_stacks_of_frees(const std::vector<TraceEvent>& events, std::size_t from) {
  std::unordered_map<std::uint64_t, StackId> open;
  std::unordered_map<std::size_t, StackId> out;
  for (std::size_t k = 0; k < events.size(); ++k) {
    const TraceEvent& e = events[k];
    if (e.action == Action::Alloc) {
      open[e.addr] = e.stack;
    } else if (e.action == Action::FreeCompleted) {
      auto it = open.find(e.addr);
      if (it == open.end()) continue;
      if (k >= from) out.emplace(k, it->second);
      open.erase(it);
    }
  }
  return out;
}

std::vector<LiveItem> live_at(const std::vector<TraceEvent>& events, EndState st, std::size_t index) {
  const auto alloc_stacks = alloc_stacks_of_frees(events, index);
  for (std::size_t k = events.size(); k-- > index;) {
    const TraceEvent& e = events[k];
    if (e.action == Action::Alloc) {
      st.blocks.erase(e.addr);
    } else if (e.action == Action::FreeCompleted) {
      const auto it = alloc_stacks.find(k);
      st.blocks[e.addr] = {it != alloc_stacks.end() ? it->second : e.stack, e.size, e.size};
    }
  }
  std::vector<LiveItem> items;
  items.reserve(st.blocks.size());
  for (const auto& [addr, item] : st.blocks) items.push_back(item);
  return items;
}

void pair_frees(DeviceTimeline& t, const std::vector<TraceEvent>& events, const EndState& st) {
  std::unordered_set<std::uint64_t> open;
  std::unordered_map<std::uint64_t, const TraceEvent*> requested;
  for (const TraceEvent& e : events) {
    if (e.action == Action::Alloc) {
      open.insert(e.addr);
    } else if (e.action == Action::FreeRequested) {
      requested[e.addr] = &e;
    } else if (e.action == Action::FreeCompleted) {
      requested.erase(e.addr);
      if (open.erase(e.addr)) {
        ++t.matched_frees;
      } else {
        ++t.frees_before_window;
        t.bytes_freed_before_window += e.size;
      }
    }
  }
  for (const auto& [addr, item] : st.blocks) {
    if (!open.count(addr)) ++t.live_from_before_window;
  }
  std::set<std::int64_t> streams;
  for (const auto& [addr, e] : requested) {
    ++t.pending_requests;
    t.pending_bytes += e->size;
    streams.insert(e->stream);
  }
  t.pending_streams.assign(streams.begin(), streams.end());
}

void mark_steps(DeviceTimeline& t, const Snapshot& s, const std::vector<TraceEvent>& events) {
  for (const Annotation& a : s.annotations) {
    if (a.device != t.device && a.device != -1) continue;
    const auto it = std::lower_bound(events.begin(), events.end(), a.time_us,
                                     [](const TraceEvent& e, std::int64_t time) { return e.time_us < time; });
    StepMark m{a.name, a.stage, a.time_us, static_cast<std::size_t>(it - events.begin()), 0};
    m.live_bytes = t.curve[m.event_index];
    t.steps.push_back(std::move(m));
  }
}

}  // namespace

std::vector<LiveItem> live_before_event(const Snapshot& s, std::int64_t device, std::size_t index) {
  if (device < 0 || static_cast<std::size_t>(device) >= s.device_traces.size()) return {};
  const auto& events = s.device_traces[static_cast<std::size_t>(device)].events;
  return live_at(events, end_state(s, device), std::min(index, events.size()));
}

std::vector<DeviceTimeline> build_timelines(const Snapshot& s) {
  std::vector<DeviceTimeline> out;
  for (std::size_t d = 0; d < s.device_traces.size(); ++d) {
    const auto& events = s.device_traces[d].events;
    if (events.empty()) continue;
    DeviceTimeline t;
    t.device = static_cast<std::int64_t>(d);
    t.events = events.size();
    EndState st = end_state(s, t.device);
    t.end_live = st.live;
    fill_curve(t, events);
    pair_frees(t, events, st);
    mark_steps(t, s, events);
    t.live_at_peak = live_at(events, std::move(st), t.peak_index);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace memsnap
