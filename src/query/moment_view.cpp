// Answering a moment query from the timelines: resolve, replay the live set, filter, group.
#include "query/moment_view.h"

namespace memsnap {

MomentView view_moment(const Snapshot& s, const std::vector<DeviceTimeline>& timelines, const MomentQuery& q) {
  MomentView v;
  v.live = live_set_at(s, resolve_moment(s, timelines, q.moment, q.device));
  SiteCache sites(s);
  apply_filter(s, sites, q.filter, v.live.allocations);
  for (const LiveAllocation& a : v.live.allocations) {
    v.requested += a.requested;
    v.bytes += a.size;
  }
  v.groups = group_live(s, sites, v.live.allocations, q.group_by, q.frame_depth);
  v.kinds = group_live(s, sites, v.live.allocations, GroupBy::Kind, q.frame_depth);
  v.pools = pool_layouts(v.live.layout);
  v.reserved = v.live.layout.reserved();
  return v;
}

}  // namespace memsnap
