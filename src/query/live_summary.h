// What a live set adds up to: its allocations grouped (by site, function, file, kind or whole
// stack) and the allocator layout summed per pool and stream (free bytes, largest free block,
// wholly free segments).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_names.h"
#include "analysis/attribution.h"
#include "analysis/layout_replay.h"
#include "query/live_set.h"

namespace memsnap {

enum class GroupBy { Site, Function, File, Kind, Stack };
template <>
struct EnumNames<GroupBy> {
  static constexpr std::array<std::string_view, 5> names = {"site", "function", "file", "kind", "stack"};
};
inline std::optional<GroupBy> parse_group_by(std::string_view text) { return enum_from_name<GroupBy>(text); }
inline const char* group_by_name(GroupBy g) { return name_of(g).data(); }

struct LiveGroup {
  std::string key;               // the site "file:line", "function (file)", the file, the kind, or the frames
  std::uint64_t requested = 0;   // requested bytes
  std::uint64_t bytes = 0;       // occupied bytes
  std::uint64_t blocks = 0;
  double percent = 0;            // of the set's requested bytes
  Category kind = Category::Unknown;  // of the largest allocation
  std::string what;              // the chosen site's "file:line (function)", or "[no stack recorded]"
  // The largest allocation's frames, at most the frame depth: its whole stack for GroupBy::Stack,
  // else the site's call path (Python frames from the site outward).
  std::vector<std::string> stack;
  StackId example_stack = kNoStack;
};

// Groups by `by`, largest requested bytes first (then by key); `depth` frames (0: all) form the
// key of GroupBy::Stack and each group's stack.
std::vector<LiveGroup> group_live(const Snapshot& snapshot, SiteCache& sites, const std::vector<LiveAllocation>& allocations,
                                  GroupBy by, std::size_t depth);

struct PoolLayout {
  bool is_large = true;
  std::int64_t stream = 0;
  std::uint64_t reserved = 0;
  std::uint64_t free = 0;                // bytes in no live block
  std::uint64_t largest_free_block = 0;  // the largest contiguous free range inside one segment
  std::uint64_t segments = 0;
  std::uint64_t wholly_free_segments = 0;
};

// Per (pool, stream), large pool first, then by stream.
std::vector<PoolLayout> pool_layouts(const DeviceLayout& layout);

}  // namespace memsnap
