// Timeline replay per device. The curve is anchored at the end (requested bytes of active and
// pending blocks) and walked backwards, so memory allocated before the window is counted.
#include "analysis/timeline.h"
#include "base/address_map.h"

#include <algorithm>
#include <set>
#include <unordered_map>

namespace memsnap {
namespace {

std::int64_t delta(const TraceEvent& e) {
  if (e.action == Action::Alloc) return static_cast<std::int64_t>(e.size);
  if (e.action == Action::FreeCompleted) return -static_cast<std::int64_t>(e.size);
  return 0;
}

struct EndState {
  std::int64_t live = 0;
  AddressMap<LiveItem> blocks;  // address -> live block (requested bytes)
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

void fill_curve(DeviceTimeline& t, const TraceEvents& events) {
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

// Live sets at several moments of one device, in one backward walk from the final state.
// `indices` must be descending; result[i] holds what was live before event indices[i]. A freed
// block is attributed to the stack that allocated it when that alloc is in the window (with
// context="all" a free carries the stack of the free itself), else to the free's stack.
std::vector<std::vector<LiveItem>> live_sets(const TraceEvents& events, const DeviceTimeline& t, EndState st,
                                             const std::vector<std::size_t>& indices) {
  std::vector<std::vector<LiveItem>> out;
  std::size_t k = events.size();
  for (const std::size_t index : indices) {
    for (; k > index; --k) {
      const TraceEvent& e = events[k - 1];
      if (e.action == Action::Alloc) {
        st.blocks.erase(e.addr);
      } else if (e.action == Action::FreeCompleted) {
        const StackId alloc_stack = t.free_alloc_stacks[k - 1];
        st.blocks[e.addr] = {alloc_stack != kUnmatched ? alloc_stack : e.stack, e.size, e.size};
      }
    }
    auto& items = out.emplace_back();
    items.reserve(st.blocks.size());
    for (const auto& [addr, item] : st.blocks) items.push_back(item);
  }
  return out;
}

// Pairs each free_completed with the open alloc of its address (nearest in time), and records
// the allocating stack of every matched free for the live-set replays.
void pair_frees(DeviceTimeline& t, const Snapshot& s, const TraceEvents& events, const EndState& st) {
  AddressMap<StackId> open;
  AddressMap<const TraceEvent*> requested;
  t.free_alloc_stacks.assign(events.size(), kUnmatched);
  for (std::size_t k = 0; k < events.size(); ++k) {
    const TraceEvent& e = events[k];
    if (e.action == Action::Alloc) {
      open[e.addr] = e.stack;
    } else if (e.action == Action::FreeRequested) {
      requested[e.addr] = &e;
    } else if (e.action == Action::FreeCompleted) {
      requested.erase(e.addr);
      if (auto it = open.find(e.addr); it != open.end()) {
        t.free_alloc_stacks[k] = it->second;
        open.erase(it);
        ++t.matched_frees;
      } else {
        ++t.frees_before_window;
        t.bytes_freed_before_window += e.size;
      }
    }
  }
  for (const auto& [addr, item] : st.blocks) {
    if (!open.contains(addr)) ++t.live_from_before_window;
  }
  std::set<std::int64_t> streams;
  for (const auto& [addr, e] : requested) {
    ++t.pending_requests;
    t.pending_bytes += e->size;
    streams.insert(s.stream(*e));
  }
  t.pending_streams.assign(streams.begin(), streams.end());
}

void mark_steps(DeviceTimeline& t, const Snapshot& s, const TraceEvents& events) {
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

std::vector<std::vector<LiveItem>> live_before_events(const Snapshot& s, const DeviceTimeline& t, std::vector<std::size_t> indices) {
  const auto device = t.device;
  if (device < 0 || static_cast<std::size_t>(device) >= s.device_traces.size()) return std::vector<std::vector<LiveItem>>(indices.size());
  const auto& events = s.device_traces[static_cast<std::size_t>(device)].events;
  for (auto& i : indices) i = std::min(i, events.size());
  std::vector<std::size_t> order(indices.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return indices[a] > indices[b]; });
  std::vector<std::size_t> descending;
  for (std::size_t i : order) descending.push_back(indices[i]);
  auto sets = live_sets(events, t, end_state(s, device), descending);
  std::vector<std::vector<LiveItem>> out(indices.size());
  for (std::size_t i = 0; i < order.size(); ++i) out[order[i]] = std::move(sets[i]);
  return out;
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
    pair_frees(t, s, events, st);
    mark_steps(t, s, events);
    t.live_at_peak = std::move(live_sets(events, t, std::move(st), {t.peak_index}).front());
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace memsnap
