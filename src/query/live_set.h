// The allocations live at one moment on one device, with where they sit (stream, pool), when
// they were allocated and freed, and the allocator layout around them; and the filters that
// narrow them (--stream, --pool, --min-size, --frame, --site).
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "analysis/attribution.h"
#include "analysis/layout_replay.h"
#include "query/moment.h"

namespace memsnap {

struct LiveAllocation {
  std::uint64_t address = 0;
  std::uint64_t size = 0;       // bytes the block occupies (the final block's size, else the rounded request)
  std::uint64_t requested = 0;  // requested bytes (the trace's size)
  std::int64_t stream = 0;
  bool is_large = true;         // pool: the segment's (large or small)
  StackId stack = kNoStack;
  std::optional<std::size_t> alloc_event, free_event;  // kept event indices; none: outside the window
  std::optional<std::int64_t> alloc_time_us, free_time_us;
};

struct LiveSet {
  Moment moment;
  std::vector<LiveAllocation> allocations;  // by address
  DeviceLayout layout;                      // segments and live blocks at the moment (unfiltered)
};

// The live set at `moment`, from the timeline's lifetimes (one pass) and the layout replay;
// without a trace, the final state's live blocks.
LiveSet live_set_at(const Snapshot& snapshot, const Moment& moment);

struct LiveFilter {
  std::optional<std::int64_t> stream;
  std::optional<bool> large;        // --pool large|small
  std::uint64_t min_size = 0;       // requested bytes
  std::optional<std::regex> frame;  // any frame's "file:line:function" matches (search)
  std::string frame_text;
  std::string site;                 // FILE:LINE: the site label equals it or ends with "/" + it
};

// Keeps only the allocations the filter accepts.
void apply_filter(const Snapshot& snapshot, SiteCache& sites, const LiveFilter& filter, std::vector<LiveAllocation>& allocations);

// Frames of a stack as "file:line:function", innermost first, without the frames PyTorch's own
// tools omit; at most `depth` of them (0: all).
std::vector<std::string> stack_frames(const Snapshot& snapshot, StackId stack, std::size_t depth);

}  // namespace memsnap
