// The replay checked against the trace's snapshot entries.
#include "analysis/snapshot_entries.h"

#include <fmt/format.h>

#include "analysis/layout_replay.h"
#include "base/format_bytes.h"

namespace memsnap {
namespace {

// A block the allocator does not split keeps the rest of its size: under 1 MiB for a large
// block (kMinLargeAlloc), under 512 bytes for a small one; oversize blocks (max_split_size) up to
// 20 MiB (max_non_split_rounding_size's default).
constexpr std::uint64_t kUnsplitSlack = 1ull << 20;
constexpr std::uint64_t kOversizeSlack = 20ull << 20;

}  // namespace

std::vector<std::string> snapshot_entry_mismatches(const Snapshot& s, const std::vector<DeviceTimeline>& timelines) {
  std::vector<std::string> out;
  const bool oversize = s.settings.max_split_size.value_or(-1) > 0;
  for (const DeviceTimeline& t : timelines) {
    if (t.actions[static_cast<std::size_t>(Action::Snapshot)] == 0) continue;
    const TraceEvents& events = s.events_of(t.device);
    std::vector<std::size_t> entries;
    for (std::size_t i = 0; i < events.size() && entries.size() < kMaxCheckedSnapshotEntries; ++i) {
      if (events[i].action == Action::Snapshot && s.pool_of_event(t.device, i).is_default()) entries.push_back(i);
    }
    const auto live = live_lifetimes(t, entries);
    std::size_t mismatches = 0;
    std::string first;
    for (std::size_t k = 0; k < entries.size(); ++k) {
      std::uint64_t replayed = 0, blocks = 0;
      for (std::size_t lifetime : live[k]) {
        std::pair<std::uint64_t, DeviceLayout::Live> block;
        if (!live_block(s, t, lifetime, block)) continue;
        replayed = saturating_add(replayed, block.second.occupied);
        ++blocks;
      }
      const std::uint64_t recorded = events[entries[k]].size;
      const std::uint64_t slack = blocks * (oversize ? kOversizeSlack : kUnsplitSlack);
      if (recorded >= replayed && recorded - replayed <= slack) continue;
      if (mismatches++ == 0) {
        first = fmt::format("device {}: the trace's snapshot entry at event {} records {} active, but the replayed layout holds {} "
                            "in {} live blocks",
                            t.device, entries[k] + s.device_traces[static_cast<std::size_t>(t.device)].dropped,
                            format_bytes(recorded), format_bytes(replayed), blocks);
      }
    }
    if (mismatches == 0) continue;
    out.push_back(first + (mismatches > 1 ? fmt::format(" ({} of {} snapshot entries checked differ)", mismatches, entries.size()) : "") +
                  ": the trace misses events there, so the replayed layouts (OOM verdicts, segment maps) may be off");
  }
  return out;
}

}  // namespace memsnap
