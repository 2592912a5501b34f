// Finds sizes, times and per-device sums that no real snapshot holds.
#include "analysis/plausibility.h"

#include <fmt/format.h>
#include <map>

namespace memsnap {
namespace {

// Collects the first example of each kind of implausible value.
class Findings {
 public:
  void note(const std::string& kind, std::string example) {
    if (seen_.emplace(kind, 0).second) out_.push_back(std::move(example));
  }
  std::vector<std::string> take() && { return std::move(out_); }

 private:
  std::map<std::string, int> seen_;
  std::vector<std::string> out_;
};

void check_segments(const Snapshot& s, Findings& f) {
  std::map<std::int64_t, std::uint64_t> reserved;
  for (std::size_t i = 0; i < s.segments.size(); ++i) {
    const Segment& seg = s.segments[i];
    if (seg.total_size > kMaxPlausibleBytes) {
      f.note("segment", fmt::format("segment {} (device {}) has total_size {} B, beyond any device (more than 1 PiB)", i,
                                    seg.device, seg.total_size));
    }
    std::uint64_t& sum = reserved[seg.device];
    if (__builtin_add_overflow(sum, seg.total_size, &sum) || sum > kMaxPlausibleBytes) {
      f.note("reserved", fmt::format("device {}: its segments add up to more than 1 PiB; the totals are meaningless", seg.device));
      sum = kMaxPlausibleBytes + 1;
    }
  }
  for (std::size_t i = 0; i < s.blocks.size(); ++i) {
    if (s.blocks[i].size > kMaxPlausibleBytes || s.blocks[i].requested_size > kMaxPlausibleBytes) {
      f.note("block", fmt::format("block {} has size {} B (requested {} B), beyond any device (more than 1 PiB)", i,
                                  s.blocks[i].size, s.blocks[i].requested_size));
    }
  }
}

void note_huge_size(std::size_t d, std::size_t k, const TraceEvent& e, Findings& f) {
  f.note("event size", fmt::format("device {} trace event {} has size {} B, beyond any device (more than 1 PiB); "
                                   "the timeline and peak are meaningless", d, k, e.size));
}

void note_bad_time(std::size_t d, std::size_t k, const TraceEvent& e, Findings& f) {
  f.note("event time", fmt::format("device {} trace event {} has time_us {}, not a time since the epoch", d, k, e.time_us));
}

// Each device's first implausible size and time, from the read's scan (TraceScan) when it stands
// for the events, else from a walk over them; in event order either way (a size before a time at
// one event), so the first example of each kind is the same.
void check_events(const Snapshot& s, Findings& f) {
  for (std::size_t d = 0; d < s.device_traces.size(); ++d) {
    const DeviceTrace& trace = s.device_traces[d];
    const TraceEvents& events = trace.events;
    if (trace.dropped == 0 && trace.scan.events == events.size()) {
      const std::uint64_t size_at = trace.scan.first_huge_size, time_at = trace.scan.first_bad_time;
      if (size_at <= time_at && size_at < events.size()) note_huge_size(d, size_at, events[size_at], f);
      if (time_at < events.size()) note_bad_time(d, time_at, events[time_at], f);
      if (size_at > time_at && size_at < events.size()) note_huge_size(d, size_at, events[size_at], f);
      continue;
    }
    for (std::size_t k = 0; k < events.size(); ++k) {
      const TraceEvent& e = events[k];
      if (implausible_size(e)) note_huge_size(d, k, e, f);
      if (implausible_time(e)) note_bad_time(d, k, e, f);
    }
  }
}

}  // namespace

std::vector<std::string> implausible_values(const Snapshot& s) {
  Findings f;
  check_segments(s, f);
  check_events(s, f);
  return std::move(f).take();
}

}  // namespace memsnap
