// SnapshotBuilder::adopt_split: the trace entries a trace split thread decoded
// (read/split_trace.h), taken as trace_fields takes each entry. Only what changes the model in
// file order is done here, in file order: the first entry of each local stack interns its frames
// and the stack, and each entry naming a stack by reference resolves it. The events themselves
// are rewritten by the event store's worker from the tables made here.
#include "model/builder.h"

#include "base/error.h"

namespace memsnap {

bool SnapshotBuilder::adopt_split(std::size_t device, SplitTrace& split, std::size_t count, std::size_t stack_count,
                                  const std::function<const Value&(std::uint64_t)>& slot, const Document& doc,
                                  std::vector<Value>& stacks) {
  if (count == 0) return true;
  // A reference to a value: a slot of the reader's memo, or one the thread copied.
  auto value_of = [&](std::uint32_t ref) -> const Value& {
    return SplitTrace::is_slot(ref) ? slot(ref & SplitTrace::kIndex) : split.values[ref & SplitTrace::kIndex];
  };
  // An action str as read, or the reader's slot holding it (the reader checked: a str).
  auto action_text = [&](const Value& action) -> const Value& { return action.kind == Kind::Interned ? slot(action.u) : action; };
  EventStore::SplitTables tables;
  stacks.assign(stack_count, Value::none());
  tables.stacks.resize(stack_count);
  std::vector<FrameId> ids;
  auto intern_local = [&](std::size_t k) {
    ids.clear();
    for (std::uint32_t f = split.stack_offsets[k]; f < split.stack_offsets[k + 1]; ++f) {
      const std::uint32_t ref = split.stack_frames[f];
      ids.push_back(SplitTrace::is_reference(ref) ? frame_of(value_of(ref), doc) : ref);
    }
    stacks[k] = intern_frame_ids(ids.data(), ids.size());
    tables.stacks[k] = static_cast<StackId>(stacks[k].u);
  };
  auto resolve_reference = [&](std::size_t i) {
    SplitEvent& e = split.events[i];
    const Value& frames = value_of(e.stack);
    const StackId id = frames.kind == Kind::Interned && frames.aux == kStackTag ? static_cast<StackId>(frames.u)
                                                                                : stack_of(frames, doc, "a trace entry's frames");
    if (id > SplitTrace::kIndex) throw InputError("the snapshot holds more stacks than memsnap's limit", kRecaptureRemedy);
    e.stack = SplitTrace::kResolved | id;
  };
  // The local stacks' first entries and the references, merged in file order.
  std::size_t k = 0, r = 0;
  const std::size_t references = std::lower_bound(split.reference_events.begin(), split.reference_events.end(), count) -
                                 split.reference_events.begin();
  while (k < stack_count || r < references) {
    if (r == references || (k < stack_count && split.stack_first[k] < split.reference_events[r])) intern_local(k++);
    else resolve_reference(split.reference_events[r++]);
  }
  for (const Value& action : split.actions) {
    tables.actions.push_back(action_of(action_text(action)));
  }
  // Streams seen first in the adopted entries get their ids in that order, as trace_fields gives them.
  for (std::size_t s = 0; s < split.streams.size() && split.stream_first[s] < count; ++s) {
    tables.streams.push_back(snap_.stream_id(split.streams[s]));
  }
  split.events.resize(count);
  const SplitEvent& last = split.events[count - 1];
  last_stream_ = split.streams[last.stream];  // trace_fields' cache of the stream seen last
  last_stream_id_ = tables.streams[last.stream];
  if (std::find(tables.actions.begin(), tables.actions.end(), Action::Unknown) != tables.actions.end()) {
    for (const SplitEvent& e : split.events) {
      if (tables.actions[e.action] != Action::Unknown) continue;
      ++snap_.unknown_actions[std::string(action_text(split.actions[e.action]).str())];
    }
  }
  events_.add_split(device, std::move(split.events), std::move(tables));
  return true;
}

}  // namespace memsnap
