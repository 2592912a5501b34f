// SnapshotBuilder's handlers for the keys PyTorch added in 2025-2026 (../shared/spec/
// snapshot-format-2026.md): a trace entry's pool_id, user_metadata, compile_context,
// internal_metadata and forward_frames (kept in Snapshot::event_facts for the entries that say
// something), forward_frames of blocks and segments, and pinned host memory (host_segments,
// host_traces).
#include "model/builder.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "model/snapshot_keys.h"
#include "model/traceback_text.h"

namespace memsnap {
namespace {

// A (first, second) pool id tuple or list; anything else is the default pool.
PoolId pool_of(const Value& v, const Document& doc) {
  PoolId p;
  if (v.kind != Kind::Tuple && v.kind != Kind::List) return p;
  int k = 0;
  for (const Value& part : doc.items(v)) {
    if (k == 0) p.first = part.as_int();
    else if (k == 1) p.second = part.as_int();
    ++k;
  }
  return p;
}

[[noreturn]] void bad_host_field(const char* where, const Value& v) {
  throw InputError(fmt::format("{} is a {}, expected a list", where, kind_name(v.kind)), kRecaptureRemedy);
}

// A str field, "" for anything else.
std::string_view text_of(const Value& v) { return v.is_str() ? v.str() : std::string_view(); }

}  // namespace

// roundup_power2_divisions: {"1": n, "2": n, ..., "32768": n}, keys the interval's start in MiB.
void read_roundup_divisions(const Value& dict, const Document& doc, AllocatorSettings& s) {
  if (dict.kind != Kind::Dict) return;
  const Value* key = nullptr;
  for (const Value& v : doc.items(dict)) {
    if (!key) {
      key = &v;
      continue;
    }
    const std::string_view name = key->is_str() ? key->str() : std::string_view();
    key = nullptr;
    std::uint64_t mib = 0;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), mib);
    const std::int64_t n = v.as_int();
    if (ec != std::errc() || end != name.data() + name.size() || !std::has_single_bit(mib) || n < 0) continue;
    const auto index = static_cast<std::size_t>(std::countr_zero(mib));
    if (index < s.roundup_power2_divisions.size()) s.roundup_power2_divisions[index] = static_cast<std::uint32_t>(std::min<std::int64_t>(n, 1 << 20));
  }
}

FrameId SnapshotBuilder::intern_frame(Frame f) {
  if (auto it = frame_index_.find({f.filename, f.name, f.line}); it != frame_index_.end()) return it->second;
  const auto id = static_cast<FrameId>(snap_.frames.size());
  f.facts = frame_facts(snap_.str(f.filename), snap_.str(f.name));
  snap_.frames.push_back(f);
  frame_index_.emplace(FrameKey{f.filename, f.name, f.line}, id);
  return id;
}

// forward_frames: traceback.format_stack() strs, outermost first; the stack is innermost first.
StackId SnapshotBuilder::traceback_stack(const Value& v, const Document& doc) {
  if (v.kind != Kind::List && v.kind != Kind::Tuple) return kNoStack;
  std::vector<FrameId> ids;
  for (const Value& item : doc.items(v)) {
    if (!item.is_str()) continue;
    grow_model(item.str().size(), "forward_frames");
    for (const TextFrame& t : parse_traceback(item.str())) {
      Frame f;
      f.filename = intern(t.file);
      f.name = intern(t.name);
      f.line = t.line;
      ids.push_back(intern_frame(f));
    }
  }
  if (ids.empty()) return kNoStack;
  std::reverse(ids.begin(), ids.end());
  return intern_stack(ids.data(), ids.size());
}

// The forward frames, then the allocation's own: the site chosen is the forward line that created
// the tensor (its first user frame); the stack is listed in Snapshot::forward_attributed.
StackId SnapshotBuilder::with_forward(StackId forward, StackId own) {
  if (forward == kNoStack) return own;
  std::vector<FrameId> ids(snap_.stack_begin(forward), snap_.stack_begin(forward) + snap_.stack_size(forward));
  ids.insert(ids.end(), snap_.stack_begin(own), snap_.stack_begin(own) + snap_.stack_size(own));
  const StackId id = intern_stack(ids.data(), ids.size());
  auto& marked = snap_.forward_attributed;
  if (const auto it = std::lower_bound(marked.begin(), marked.end(), id); it == marked.end() || *it != id) marked.insert(it, id);
  return id;
}

namespace {

bool has_forward_frames(const Value& forward, const Document& doc) {
  return (forward.kind == Kind::List || forward.kind == Kind::Tuple) && doc.size(forward) > 0;
}

// True when the entry's 2026 fields say nothing: each absent, empty, the default pool (0, 0), or
// the compile_context "N/A" PyTorch writes in every entry. An absent field (most of them, in
// most entries) is decided by its kind alone.
bool has_no_event_facts(const TraceFields& f, const Document& doc) {
  if (plainly_no_event_facts(f)) return true;  // the usual entry
  for (unsigned k = 0; k < kTraceExtraCount; ++k) {
    const Value& v = f.extra[k];
    if (v.kind == Kind::None) continue;
    switch (static_cast<TraceField>(k + static_cast<unsigned>(TraceField::PoolId))) {
      case TraceField::PoolId:
        if (!pool_of(v, doc).is_default()) return false;
        break;
      case TraceField::ForwardFrames:
        if (has_forward_frames(v, doc)) return false;
        break;
      case TraceField::CompileContext:
        if (const std::string_view context = text_of(v); !context.empty() && context != "N/A") return false;
        break;
      default:
        if (!text_of(v).empty()) return false;
        break;
    }
  }
  return true;
}

}  // namespace

StackId SnapshotBuilder::note_event_facts(std::size_t device, const TraceFields& f, const Document& doc, StackId stack) {
  if (has_no_event_facts(f, doc)) return stack;
  EventFacts facts;
  facts.pool = pool_of(f.extra[extra_slot(TraceField::PoolId)], doc);
  const std::string_view metadata = text_of(f.extra[extra_slot(TraceField::UserMetadata)]);
  const std::string_view context = text_of(f.extra[extra_slot(TraceField::CompileContext)]);
  const std::string_view internal = text_of(f.extra[extra_slot(TraceField::InternalMetadata)]);
  const std::string_view category = text_of(f.extra[extra_slot(TraceField::Category)]);
  const Value& forward = f.extra[extra_slot(TraceField::ForwardFrames)];
  const bool has_forward = has_forward_frames(forward, doc);
  facts.entry = events_.entries(device);
  if (!metadata.empty()) facts.user_metadata = intern(metadata);
  if (!context.empty() && context != "N/A") facts.compile_context = intern(context);
  if (!internal.empty()) facts.internal_metadata = intern(internal);
  if (!category.empty()) facts.category = intern(category);
  if (has_forward) facts.forward_stack = traceback_stack(forward, doc);
  grow_model(sizeof(EventFacts), "trace entries");
  if (snap_.event_facts.size() <= device) snap_.event_facts.resize(device + 1);
  snap_.event_facts[device].push_back(facts);
  return with_forward(facts.forward_stack, stack);
}

// host_segments: the same keys as segments (device -1), kept apart in Snapshot::host.
void SnapshotBuilder::read_host_segments(const Value& list, const Document& doc) {
  snap_.host.present = true;
  if (list.kind != Kind::List) bad_host_field("host_segments", list);
  std::swap(snap_.segments, snap_.host.segments);
  std::swap(snap_.blocks, snap_.host.blocks);
  reading_host_ = true;
  struct Restore {
    SnapshotBuilder& b;
    ~Restore() {
      b.reading_host_ = false;
      std::swap(b.snap_.segments, b.snap_.host.segments);
      std::swap(b.snap_.blocks, b.snap_.host.blocks);
    }
  } restore{*this};
  read_segments(list, doc);
}

// host_traces: one flat list of entries (no per-device lists), read like device entries.
void SnapshotBuilder::read_host_traces(const Value& list, const Document& doc) {
  snap_.host.present = true;
  if (list.kind != Kind::List) bad_host_field("host_traces", list);
  for (const Value& entry : doc.items(list)) {
    ++snap_.host.events_in_file;
    if (entry.kind != Kind::Dict) continue;
    TraceEvent e;
    bool counted = false;
    const Value* key = nullptr;
    for (const Value& v : doc.items(entry)) {
      if (!key) {
        key = &v;
        continue;
      }
      const std::string_view name = key->kind == Kind::Str ? key->str() : std::string_view();
      key = nullptr;
      switch (field_of(trace_entry_keys(), name)) {
        case TraceField::Action: if (v.is_str()) e.action = parse_action(v.str()); break;
        case TraceField::Addr: e.addr = static_cast<std::uint64_t>(v.as_int()); break;
        case TraceField::Size: e.size = static_cast<std::uint64_t>(std::max<std::int64_t>(0, v.as_int())); break;
        case TraceField::Stream: e.stream_id = snap_.stream_id(v.as_int()); break;
        case TraceField::Time:
          e.time_us = v.as_int();
          e.has_time = true;
          break;
        case TraceField::Frames: e.stack = stack_of(v, doc, "a host trace entry's frames"); break;
        case TraceField::Unknown:
          if (!counted) count_unknown("host_trace_entry", name);
          counted = true;
          break;
        default: break;
      }
    }
    grow_model(sizeof(TraceEvent), "host_traces");
    snap_.host.events.push_back(e);
  }
}

}  // namespace memsnap
