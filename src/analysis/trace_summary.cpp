// Counting the trace window: actions, drops, OOM events, from the kept events the timelines
// went through (pending free requests come from the timeline's pairing, see analyze.cpp).
#include "analysis/trace_summary.h"

#include "analysis/timeline.h"

namespace memsnap {

TraceSummary summarize_trace(const Snapshot& snapshot, const std::vector<DeviceTimeline>& timelines) {
  TraceSummary s;
  for (const DeviceTrace& trace : snapshot.device_traces) {
    s.events += trace.total;
    s.dropped += trace.dropped;
    s.analyzed += trace.events.size();
  }
  for (const DeviceTimeline& t : timelines) {
    for (std::size_t a = 0; a < t.actions.size(); ++a) s.actions[a] += t.actions[a];
    const TraceEvents& events = snapshot.events_of(t.device);
    for (std::size_t i : t.oom_events) {
      const TraceEvent& e = events[i];
      s.ooms.push_back({t.device, e.size, e.addr, snapshot.stream(e), e.time_us, e.stack, i, snapshot.pool_of_event(t.device, i)});
    }
  }
  s.has_history = s.analyzed > 0;
  return s;
}

}  // namespace memsnap
