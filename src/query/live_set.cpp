// Building and filtering the live set at a moment from the timeline's lifetimes.
#include "query/live_set.h"

#include <algorithm>
#include <iterator>

#include "analysis/frame_filter.h"

namespace memsnap {
namespace {

// The segment range holding `address` at the moment, or null.
const DeviceLayout::Range* range_of(const DeviceLayout& layout, std::uint64_t address) {
  auto it = layout.segments.upper_bound(address);
  if (it == layout.segments.begin()) return nullptr;
  --it;
  return address < it->second.end ? &it->second : nullptr;
}

void place(LiveAllocation& a, const DeviceLayout& layout) {
  if (const DeviceLayout::Range* r = range_of(layout, a.address)) {
    a.stream = r->stream;
    a.is_large = r->is_large;
  } else {
    a.is_large = a.size > 1048576;  // no segment holds it (a broken trace): PyTorch's small-pool limit
  }
}

std::vector<LiveAllocation> final_allocations(const Snapshot& s, std::int64_t device) {
  std::vector<LiveAllocation> out;
  for (const Segment& seg : s.segments) {
    if (seg.device != device) continue;
    for (std::uint32_t i = 0; i < seg.block_count && seg.first_block + i < s.blocks.size(); ++i) {
      const Block& b = s.blocks[seg.first_block + i];
      if (b.state != BlockState::ActiveAllocated && b.state != BlockState::ActivePendingFree) continue;
      out.push_back({b.address, b.size, b.requested_size, seg.stream, seg.is_large, b.stack, {}, {}, {}, {}});
    }
  }
  return out;
}

std::optional<std::int64_t> time_of(const TraceEvents& events, std::size_t index) {
  return events[index].has_time ? std::optional<std::int64_t>(events[index].time_us) : std::nullopt;
}

std::vector<LiveAllocation> traced_allocations(const Snapshot& s, const DeviceTimeline& t, std::size_t index,
                                               const DeviceLayout& layout) {
  const TraceEvents& events = s.events_of(t.device);
  std::vector<LiveAllocation> out;
  const auto live = live_lifetimes(t, {index});
  for (std::size_t lifetime : live.front()) {
    std::pair<std::uint64_t, DeviceLayout::Live> block;
    if (!live_block(s, t, lifetime, block)) continue;
    const Lifetime& l = t.lifetimes[lifetime];
    LiveAllocation a{block.first, block.second.occupied, block.second.requested, 0, true, block.second.stack, {}, {}, {}, {}};
    place(a, layout);
    if (l.alloc != kBeforeWindow) {
      a.alloc_event = l.alloc;
      a.alloc_time_us = time_of(events, l.alloc);
      if (!range_of(layout, a.address)) a.stream = s.stream(events[l.alloc]);
    }
    if (l.free != kStillLive) {
      a.free_event = l.free;
      a.free_time_us = time_of(events, l.free);
    }
    out.push_back(a);
  }
  return out;
}

bool frame_matches(const Snapshot& s, StackId stack, const std::regex& re) {
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    if (std::regex_search(format_frame(s, frames[i]), re)) return true;
  }
  return false;
}

bool site_matches(const std::string& label, const std::string& wanted) {
  return label == wanted || (label.size() > wanted.size() && label.ends_with(wanted) && label[label.size() - wanted.size() - 1] == '/');
}

}  // namespace

LiveSet live_set_at(const Snapshot& s, const Moment& moment) {
  LiveSet out;
  out.moment = moment;
  if (!moment.timeline) {
    out.layout = final_device_layout(s, moment.device);
    out.allocations = final_allocations(s, moment.device);
  } else {
    out.layout = std::move(layouts_before(s, *moment.timeline, {moment.index}).front());
    out.allocations = traced_allocations(s, *moment.timeline, moment.index, out.layout);
  }
  std::stable_sort(out.allocations.begin(), out.allocations.end(),
                   [](const LiveAllocation& a, const LiveAllocation& b) { return a.address < b.address; });
  return out;
}

void apply_filter(const Snapshot& s, SiteCache& sites, const LiveFilter& f, std::vector<LiveAllocation>& allocations) {
  std::erase_if(allocations, [&](const LiveAllocation& a) {
    if (f.stream && a.stream != *f.stream) return true;
    if (f.large && a.is_large != *f.large) return true;
    if (a.requested < f.min_size) return true;
    if (f.frame && !frame_matches(s, a.stack, *f.frame)) return true;
    return !f.site.empty() && !site_matches(sites.describe(a.stack).site, f.site);
  });
}

std::vector<std::string> stack_frames(const Snapshot& s, StackId stack, std::size_t depth) {
  std::vector<std::string> out;
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = 0; i < s.stack_size(stack) && (depth == 0 || out.size() < depth); ++i) {
    const Frame& f = s.frames[frames[i]];
    if (is_omitted_frame(s.str(f.filename), s.str(f.name))) continue;
    out.push_back(format_frame(s, frames[i]));
  }
  return out;
}

}  // namespace memsnap
