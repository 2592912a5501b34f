// Resolving a moment option to a device and an event index, from the timelines' replay.
#include "query/moment.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fmt/format.h>

#include "analysis/steps.h"
#include "base/error.h"

namespace memsnap {
namespace {

const DeviceTimeline* timeline_of(const std::vector<DeviceTimeline>& timelines, std::int64_t device) {
  for (const auto& t : timelines) {
    if (t.device == device) return &t;
  }
  return nullptr;
}

std::int64_t default_device(const Snapshot& s, const std::vector<DeviceTimeline>& timelines) {
  const DeviceTimeline* best = nullptr;
  for (const auto& t : timelines) {
    if (t.peak_allocated && (!best || *t.peak_allocated > *best->peak_allocated)) best = &t;
  }
  if (best) return best->device;
  return s.segments.empty() ? 0 : s.segments.front().device;
}

std::optional<std::int64_t> time_after(const TraceEvents& events, std::size_t index) {
  if (index == 0 || index > events.size() || !events[index - 1].has_time) return std::nullopt;
  return events[index - 1].time_us;
}

std::optional<std::int64_t> first_time(const TraceEvents& events) {
  for (const TraceEvent& e : events) {
    if (e.has_time) return e.time_us;
  }
  return std::nullopt;
}

[[noreturn]] void no_moment(const std::string& problem, const std::string& remedy) { throw InputError(problem, remedy); }

// The index of a global OOM number, over the timelines in device order (the report's order).
void resolve_oom(Moment& m, const std::vector<DeviceTimeline>& timelines, std::uint64_t number) {
  std::uint64_t seen = 0;
  for (const auto& t : timelines) {
    if (number < seen + t.oom_events.size()) {
      m.device = t.device;
      m.timeline = &t;
      m.index = t.oom_events[number - seen];
      m.description = fmt::format("just before OOM {} (event {})", number, m.index);
      return;
    }
    seen += t.oom_events.size();
  }
  no_moment(fmt::format("--oom {}: the trace has {} OOM event(s)", number, seen),
            seen ? fmt::format("pick one of 0..{}", seen - 1) : std::string("use --peak or --event N instead"));
}

void resolve_step(Moment& m, const Snapshot& s, std::uint64_t number) {
  const Steps steps = find_steps(s, *m.timeline);
  if (!steps.found()) {
    no_moment(fmt::format("--step {}: no training steps were found on device {}", number, m.device),
              "use --annotation NAME or --event N instead");
  }
  if (number >= steps.boundaries.size()) {
    no_moment(fmt::format("--step {}: device {} has {} step boundaries ({})", number, m.device, steps.boundaries.size(),
                          step_source_name(steps.source)),
              fmt::format("pick one of 0..{}", steps.boundaries.size() - 1));
  }
  m.index = steps.boundaries[number];
  m.description = fmt::format("at step boundary {} of {} ({} {})", number, steps.boundaries.size(),
                              step_source_name(steps.source), steps.marker);
}

void resolve_annotation(Moment& m, const MomentSpec& spec) {
  std::vector<const StepMark*> marks;
  for (const StepMark& mark : m.timeline->steps) {
    if (mark.name == spec.annotation) marks.push_back(&mark);
  }
  if (spec.occurrence >= marks.size()) {
    no_moment(fmt::format("--annotation {}#{}: device {} has {} annotation(s) named {}", spec.annotation, spec.occurrence,
                          m.device, marks.size(), spec.annotation),
              marks.empty() ? std::string("list them with `memsnap dump PATH --what annotations`")
                            : fmt::format("pick #0..#{}", marks.size() - 1));
  }
  const StepMark& mark = *marks[spec.occurrence];
  m.index = mark.event_index;
  m.description = fmt::format("at annotation {}#{} ({} at {} us)", spec.annotation, spec.occurrence,
                              mark.stage.empty() ? "mark" : mark.stage, mark.time_us);
}

void resolve_time(Moment& m, const TraceEvents& events, const MomentSpec& spec) {
  std::int64_t at = spec.time_us;
  if (spec.relative) {
    const auto first = first_time(events);
    if (!first) no_moment(fmt::format("--time: device {} records no event times", m.device), "use --event N instead");
    at += *first;
  }
  const auto it = std::upper_bound(events.begin(), events.end(), at,
                                   [](std::int64_t time, const TraceEvent& e) { return time < e.time_us; });
  m.index = static_cast<std::size_t>(it - events.begin());
  m.description = fmt::format("at time_us {} (after {} events)", at, m.index);
}

}  // namespace

std::optional<MomentSpec> parse_time_spec(std::string_view text) {
  struct Unit {
    std::string_view suffix;
    double us;
  };
  static constexpr Unit kUnits[] = {{"us", 1}, {"ms", 1e3}, {"s", 1e6}};
  MomentSpec spec;
  spec.kind = MomentKind::Time;
  for (const Unit& u : kUnits) {
    if (text.size() <= u.suffix.size() || !text.ends_with(u.suffix)) continue;
    const std::string_view number = text.substr(0, text.size() - u.suffix.size());
    double value = 0;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (ec != std::errc{} || end != number.data() + number.size() || !std::isfinite(value) || value < 0 || value * u.us > 9e18) {
      return std::nullopt;
    }
    spec.time_us = static_cast<std::int64_t>(std::llround(value * u.us));
    spec.relative = true;
    return spec;
  }
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), spec.time_us);
  if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return spec;
}

MomentSpec annotation_spec(std::string_view text) {
  MomentSpec spec;
  spec.kind = MomentKind::Annotation;
  spec.annotation = std::string(text);
  const auto hash = text.rfind('#');
  if (hash == std::string_view::npos || hash + 1 == text.size()) return spec;
  std::size_t occurrence = 0;
  const std::string_view digits = text.substr(hash + 1);
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), occurrence);
  if (ec != std::errc{} || end != digits.data() + digits.size()) return spec;
  spec.occurrence = occurrence;
  spec.annotation = std::string(text.substr(0, hash));
  spec.number = 1;  // the #i was given: NAME#i may also be a whole name (ProfilerStep#3)
  return spec;
}

Moment resolve_moment(const Snapshot& s, const std::vector<DeviceTimeline>& timelines, const MomentSpec& spec,
                      std::optional<std::int64_t> device) {
  Moment m;
  m.kind = spec.kind;
  if (spec.kind == MomentKind::Oom && !device) {
    resolve_oom(m, timelines, spec.number);
  } else {
    m.device = device.value_or(default_device(s, timelines));
    m.timeline = timeline_of(timelines, m.device);
  }
  const TraceEvents& events = s.events_of(m.device);
  m.events = events.size();
  if (!m.timeline) {
    if (spec.kind != MomentKind::End) {
      no_moment(fmt::format("device {} has no trace events to replay", m.device),
                "only the final state can be shown (omit the moment option), or record the trace with "
                "torch.cuda.memory._record_memory_history() (run `memsnap capture`)");
    }
    m.description = "at the end (the snapshot's final state)";
    return m;
  }
  switch (spec.kind) {
    case MomentKind::End:
      m.index = events.size();
      m.description = "at the end (the snapshot's final state)";
      break;
    case MomentKind::Event:
      if (spec.number >= events.size()) {
        no_moment(fmt::format("--event {}: device {} has {} kept trace events", spec.number, m.device, events.size()),
                  fmt::format("pick one of 0..{}", events.size() - 1));
      }
      m.index = spec.number + 1;
      m.description = fmt::format("after event {} ({})", spec.number, action_name(events[spec.number].action));
      break;
    case MomentKind::Time:
      resolve_time(m, events, spec);
      break;
    case MomentKind::Step:
      resolve_step(m, s, spec.number);
      break;
    case MomentKind::Annotation: {
      const bool whole = std::any_of(m.timeline->steps.begin(), m.timeline->steps.end(), [&](const StepMark& mark) {
        return spec.number == 1 && mark.name == fmt::format("{}#{}", spec.annotation, spec.occurrence);
      });
      MomentSpec named = spec;
      if (whole) {
        named.annotation = fmt::format("{}#{}", spec.annotation, spec.occurrence);
        named.occurrence = 0;
      }
      resolve_annotation(m, named);
      break;
    }
    case MomentKind::Peak:
      m.index = m.timeline->peak_index;
      m.description = fmt::format("at the peak (after {} events)", m.index);
      break;
    case MomentKind::Oom: {
      if (!device) break;  // numbered over all devices above
      const auto& ooms = m.timeline->oom_events;
      if (spec.number >= ooms.size()) {
        no_moment(fmt::format("--oom {}: device {} has {} OOM event(s)", spec.number, m.device, ooms.size()),
                  ooms.empty() ? std::string("use --peak or --event N instead") : fmt::format("pick one of 0..{}", ooms.size() - 1));
      }
      m.index = ooms[spec.number];
      m.description = fmt::format("just before OOM {} (event {})", spec.number, m.index);
      break;
    }
  }
  m.time_us = time_after(events, m.index);
  return m;
}

}  // namespace memsnap
