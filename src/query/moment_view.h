// One query of `memsnap at` / `memsnap blocks` / the exports: the moment resolved, its live set
// filtered, grouped, budgeted by kind and its layout summed per pool.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "query/live_summary.h"

namespace memsnap {

struct MomentQuery {
  MomentSpec moment;
  std::optional<std::int64_t> device;
  LiveFilter filter;
  GroupBy group_by = GroupBy::Site;
  std::size_t frame_depth = 0;  // 0: every frame
};

struct MomentView {
  LiveSet live;                  // allocations filtered; the layout is the whole device's
  std::uint64_t requested = 0;   // of the filtered allocations
  std::uint64_t bytes = 0;
  std::vector<LiveGroup> groups;  // by query.group_by
  std::vector<LiveGroup> kinds;   // by kind
  std::vector<PoolLayout> pools;
  std::uint64_t reserved = 0;     // of the device at the moment
};

// Answers the query from the timelines (build_timelines() of the same snapshot).
MomentView view_moment(const Snapshot& snapshot, const std::vector<DeviceTimeline>& timelines, const MomentQuery& query);

}  // namespace memsnap
