// Names of the model's enums, as PyTorch spells them.
#include "model/snapshot.h"

#include <algorithm>
#include <array>
#include <fmt/format.h>

#include "base/error.h"

namespace memsnap {
namespace {
constexpr std::array<const char*, kActionCount> kActionNames = {
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
    "segment_unmap", "snapshot", "oom", "user_defined", "annotate", "unknown"};
}  // namespace

const char* action_name(Action action) { return kActionNames[static_cast<std::size_t>(action)]; }

Action parse_action(std::string_view name) {
  for (std::size_t i = 0; i + 1 < kActionNames.size(); ++i) {
    if (name == kActionNames[i]) return static_cast<Action>(i);
  }
  return Action::Unknown;
}

StreamId Snapshot::stream_id(std::int64_t stream) {
  if (const auto it = stream_ids.find(stream); it != stream_ids.end()) return it->second;
  if (streams.size() >= kMaxStreams) {
    throw InputError(fmt::format("the trace uses more than {} distinct streams, more than memsnap's limit", kMaxStreams),
                     kRecaptureRemedy);
  }
  const auto id = static_cast<StreamId>(streams.size());
  streams.push_back(stream);
  stream_ids.emplace(stream, id);
  return id;
}

const TraceEvents& Snapshot::events_of(std::int64_t device) const {
  static const TraceEvents kNone;
  if (device < 0 || static_cast<std::size_t>(device) >= device_traces.size()) return kNone;
  return device_traces[static_cast<std::size_t>(device)].events;
}

const EventFacts* Snapshot::facts_of_event(std::int64_t device, std::size_t index) const {
  if (device < 0 || static_cast<std::size_t>(device) >= event_facts.size()) return nullptr;
  const auto& list = event_facts[static_cast<std::size_t>(device)];
  if (list.empty()) return nullptr;
  const std::uint64_t dropped =
      static_cast<std::size_t>(device) < device_traces.size() ? device_traces[static_cast<std::size_t>(device)].dropped : 0;
  const std::uint64_t entry = index + dropped;
  const auto it = std::lower_bound(list.begin(), list.end(), entry, [](const EventFacts& f, std::uint64_t e) { return f.entry < e; });
  return it != list.end() && it->entry == entry ? &*it : nullptr;
}

const FxFrame* Snapshot::fx_frame(FrameId f) const {
  const auto it = std::lower_bound(fx_frames.begin(), fx_frames.end(), f, [](const FxFrame& x, FrameId id) { return x.frame < id; });
  return it != fx_frames.end() && it->frame == f ? &*it : nullptr;
}

const AllocationTag& Snapshot::tag_of(StackId stack) const {
  const auto it = std::lower_bound(tagged_stacks.begin(), tagged_stacks.end(), std::make_pair(stack, std::uint32_t{0}));
  return it != tagged_stacks.end() && it->first == stack ? allocation_tags[it->second] : allocation_tags.front();
}

}  // namespace memsnap
