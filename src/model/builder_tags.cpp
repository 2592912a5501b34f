// SnapshotBuilder's per-allocation facts of the 2026 format: FX frames with fx_original_trace
// (the model's lines put before the generated frame, so the site is the model's line), and the
// allocation tags (compiled region, user_metadata label, annotate text, profiler category) that
// give a trace allocation, and the live block it made, a stack of its own.
#include "model/builder.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "model/traceback_text.h"

namespace memsnap {
namespace {

template <typename T>
void insert_sorted(std::vector<T>& list, const T& value) {
  if (const auto it = std::lower_bound(list.begin(), list.end(), value); it == list.end() || *it != value) list.insert(it, value);
}

// "a", then "a; b": the texts of several annotate entries on one allocation, each once.
std::string joined_note(std::string_view old_note, std::string_view text) {
  if (old_note.empty()) return std::string(text);
  const std::string sep = "; ";
  const std::string padded = sep + std::string(old_note) + sep;
  if (padded.find(sep + std::string(text) + sep) != std::string::npos) return std::string(old_note);
  return std::string(old_note) + sep + std::string(text);
}

}  // namespace

void SnapshotBuilder::note_fx_frame(FrameId frame, const FxKeys& fx) {
  if (snap_.fx_frame(frame)) return;
  FxFrame out;
  out.frame = frame;
  auto text = [&](std::size_t k) { return fx.values[k] && fx.values[k]->is_str() ? intern(fx.values[k]->str()) : StrId{0}; };
  out.node_op = text(0);
  out.node_name = text(1);
  out.node_target = text(2);
  if (const Value* trace = fx.values[3]; trace && trace->is_str()) {
    grow_model(trace->str().size(), "fx_original_trace");
    std::vector<FrameId> ids;
    for (const TextFrame& t : parse_traceback(trace->str())) {
      Frame f;
      f.filename = intern(t.file);
      f.name = intern(t.name);
      f.line = t.line;
      ids.push_back(intern_frame(f));
    }
    std::reverse(ids.begin(), ids.end());  // the stack_trace text is outermost first
    if (!ids.empty()) {
      expanding_fx_ = true;
      out.original = intern_stack(ids.data(), ids.size());
      expanding_fx_ = false;
    }
  }
  const auto it = std::lower_bound(snap_.fx_frames.begin(), snap_.fx_frames.end(), frame,
                                   [](const FxFrame& x, FrameId id) { return x.frame < id; });
  snap_.fx_frames.insert(it, out);
}

StackId SnapshotBuilder::intern_fx_stack(const FrameId* ids, std::size_t count) {
  std::vector<FrameId> expanded;
  bool any = false;
  for (std::size_t k = 0; k < count; ++k) {
    const FxFrame* fx = snap_.fx_frame(ids[k]);
    if (fx && fx->original != kNoStack) {
      // The original trace's outer lines (train.py calling the model) are on the stack already.
      for (std::size_t j = 0; j < snap_.stack_size(fx->original); ++j) {
        const FrameId f = snap_.stack_begin(fx->original)[j];
        if (std::find(ids + k + 1, ids + count, f) == ids + count) expanded.push_back(f);
      }
      any = true;
    }
    expanded.push_back(ids[k]);
  }
  expanding_fx_ = true;
  const StackId id = any ? intern_stack(expanded.data(), expanded.size()) : intern_stack(ids, count);
  expanding_fx_ = false;
  if (any) insert_sorted(snap_.fx_attributed, id);
  return id;
}

StackId SnapshotBuilder::tagged_stack(StackId stack, std::uint32_t tag) {
  const auto [it, inserted] = tagged_copies_.try_emplace(std::make_pair(stack, tag), kNoStack);
  if (!inserted) return it->second;
  const auto id = static_cast<StackId>(snap_.stack_count());
  const std::size_t n = snap_.stack_size(stack);
  grow_model(n * sizeof(FrameId) + sizeof(std::uint32_t), "tagged stacks");
  const std::size_t first = snap_.stack_offsets[stack];
  for (std::size_t k = 0; k < n; ++k) snap_.stack_frames.push_back(snap_.stack_frames[first + k]);
  snap_.stack_offsets.push_back(static_cast<std::uint32_t>(snap_.stack_frames.size()));
  if (snap_.forward_attributed_stack(stack)) insert_sorted(snap_.forward_attributed, id);
  if (snap_.fx_attributed_stack(stack)) insert_sorted(snap_.fx_attributed, id);
  snap_.tagged_stacks.emplace_back(id, tag);  // ids only grow: the list stays sorted
  it->second = id;
  return id;
}

// Per device, in event order: an alloc's region, label and category; an annotate entry's text goes
// to the allocation live at its address. Live blocks at the end take their allocation's stack.
void SnapshotBuilder::tag_allocations() {
  constexpr std::size_t kUntagged = static_cast<std::size_t>(-1);
  for (std::size_t d = 0; d < snap_.event_facts.size() && d < snap_.device_traces.size(); ++d) {
    if (snap_.event_facts[d].empty()) continue;
    auto& events = snap_.device_traces[d].events;
    struct Live {
      std::size_t event = 0;
      std::size_t tag = kUntagged;  // index into `tags`
    };
    std::unordered_map<std::uint64_t, Live> live;              // address -> its alloc
    std::vector<std::pair<std::size_t, AllocationTag>> tags;  // (alloc event, its tag)
    const auto device = static_cast<std::int64_t>(d);
    for (std::size_t i = 0; i < events.size(); ++i) {
      const TraceEvent& e = events[i];
      const EventFacts* facts = snap_.facts_of_event(device, i);
      if (e.action == Action::Alloc) {
        Live& l = live[e.addr];
        l = {i, kUntagged};
        const AllocationTag tag = facts ? AllocationTag{facts->compile_context, facts->user_metadata, 0, facts->category} : AllocationTag{};
        if (!tag.empty()) {
          l.tag = tags.size();
          tags.emplace_back(i, tag);
        }
      } else if (e.action == Action::Annotate && facts && facts->user_metadata) {
        const auto at = live.find(e.addr);
        if (at == live.end()) continue;
        if (at->second.tag == kUntagged) {
          at->second.tag = tags.size();
          tags.emplace_back(at->second.event, AllocationTag{});
        }
        AllocationTag& tag = tags[at->second.tag].second;
        tag.note = intern(joined_note(snap_.str(tag.note), snap_.str(facts->user_metadata)));
      } else if (e.action == Action::FreeCompleted) {
        live.erase(e.addr);
      }
    }
    if (tags.empty()) continue;
    snap_.device_traces[d].pairs.drop();  // its lifetimes hold the stacks about to be tagged
    std::unordered_map<std::uint64_t, std::pair<StackId, StackId>> retagged;  // live address -> (stack before, tagged)
    for (const auto& [i, tag] : tags) {
      const auto [found, added] = tag_index_.try_emplace(std::tuple(tag.region, tag.label, tag.note, tag.category),
                                                         static_cast<std::uint32_t>(snap_.allocation_tags.size()));
      if (added) snap_.allocation_tags.push_back(tag);
      const StackId before = events[i].stack;
      events[i].stack = tagged_stack(before, found->second);
      if (const auto at = live.find(events[i].addr); at != live.end() && at->second.event == i) {
        retagged[events[i].addr] = {before, events[i].stack};
      }
    }
    for (const Segment& seg : snap_.segments) {
      if (seg.device != device) continue;
      for (std::uint32_t k = 0; k < seg.block_count && seg.first_block + k < snap_.blocks.size(); ++k) {
        Block& b = snap_.blocks[seg.first_block + k];
        const auto at = retagged.find(b.address);
        if (at == retagged.end() || b.state == BlockState::Inactive) continue;
        if (b.stack == at->second.first || b.stack == kNoStack) b.stack = at->second.second;
      }
    }
  }
}

}  // namespace memsnap
