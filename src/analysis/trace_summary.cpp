// Counting the trace window: actions, drops, free requests without completion, OOM events.
#include "analysis/trace_summary.h"
#include "base/address_map.h"

#include <unordered_map>

namespace memsnap {

TraceSummary summarize_trace(const Snapshot& snapshot) {
  TraceSummary s;
  for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    const DeviceTrace& trace = snapshot.device_traces[d];
    s.events += trace.total;
    s.dropped += trace.dropped;
    s.analyzed += trace.events.size();
    AddressMap<std::uint64_t> requested;  // addr -> open free requests
    for (std::size_t i = 0; i < trace.events.size(); ++i) {
      const TraceEvent& e = trace.events[i];
      ++s.actions[static_cast<std::size_t>(e.action)];
      if (e.action == Action::FreeRequested) {
        ++requested[e.addr];
      } else if (e.action == Action::FreeCompleted) {
        auto it = requested.find(e.addr);
        if (it != requested.end() && it->second > 0 && --it->second == 0) requested.erase(it);
      } else if (e.action == Action::Oom) {
        s.ooms.push_back({static_cast<std::int64_t>(d), e.size, e.addr, e.stream, e.time_us, e.stack, i});
      }
    }
    for (const auto& [addr, count] : requested) s.pending_free_requests += count;
  }
  s.has_history = s.analyzed > 0;
  return s;
}

}  // namespace memsnap
