// Counting the trace window: actions, drops, OOM events (pending free requests come from the
// timeline's pairing, see analyze.cpp).
#include "analysis/trace_summary.h"

namespace memsnap {

TraceSummary summarize_trace(const Snapshot& snapshot) {
  TraceSummary s;
  for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    const DeviceTrace& trace = snapshot.device_traces[d];
    s.events += trace.total;
    s.dropped += trace.dropped;
    s.analyzed += trace.events.size();
    for (std::size_t i = 0; i < trace.events.size(); ++i) {
      const TraceEvent& e = trace.events[i];
      ++s.actions[static_cast<std::size_t>(e.action)];
      if (e.action == Action::Oom) {
        s.ooms.push_back({static_cast<std::int64_t>(d), e.size, e.addr, snapshot.stream(e), e.time_us, e.stack, i});
      }
    }
  }
  s.has_history = s.analyzed > 0;
  return s;
}

}  // namespace memsnap
