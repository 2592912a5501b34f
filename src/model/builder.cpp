// SnapshotBuilder: validates the snapshot's fields, interns frames and stacks, keeps the newest
// N trace events per device, and counts what it tolerated (unknown keys and actions).
#include "model/builder.h"

#include <absl/hash/hash.h>
#include <absl/types/span.h>
#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/limits.h"
#include "model/snapshot_keys.h"

namespace memsnap {
namespace {

template <typename Fn>
void for_each_pair(const Document& doc, const Value& dict, Fn&& fn) {
  const Value* key = nullptr;
  for (const Value& v : doc.items(dict)) {
    if (!key) {
      key = &v;
      continue;
    }
    fn(key->kind == Kind::Str ? key->str() : std::string_view(), v);
    key = nullptr;
  }
}

[[noreturn]] void bad_field(const std::string& where, const Value& v, const char* expected) {
  if (v.kind == Kind::Released) {
    throw InputError(fmt::format("{} reuses an object in a way no PyTorch snapshot does", where), kRecaptureRemedy);
  }
  if (v.kind == Kind::BigInt) {
    throw InputError(fmt::format("{} is an int wider than 64 bits, too large for any size, address or time", where), kRecaptureRemedy);
  }
  throw InputError(fmt::format("{} is a {}, expected {}", where, kind_name(v.kind), expected), kRecaptureRemedy);
}

std::uint64_t as_size(const Value& v, const char* where) {
  if (v.kind == Kind::Int && v.i >= 0) return static_cast<std::uint64_t>(v.i);
  if (v.kind == Kind::UInt) return v.u;
  if (v.kind == Kind::Int) bad_field(where, v, "a non-negative int");
  bad_field(where, v, "an int");
}

std::int64_t as_int(const Value& v, const char* where) {
  if (v.kind == Kind::Int || v.kind == Kind::Bool) return v.i;
  if (v.kind == Kind::UInt) return static_cast<std::int64_t>(v.u);  // raw stream pointers may exceed 2^63
  bad_field(where, v, "an int");
}

// segment_pool_id: a (pool, id) tuple or list; other shapes are ignored.
void read_pool_id(const Value& v, const Document& doc, Segment& seg) {
  if (v.kind != Kind::Tuple && v.kind != Kind::List) return;
  int k = 0;
  for (const Value& part : doc.items(v)) {
    if (k < 2) seg.pool_id[k++] = part.as_int();
  }
}

BlockState parse_state(std::string_view s) {
  if (s == "active_allocated") return BlockState::ActiveAllocated;
  if (s == "active_pending_free" || s == "active_awaiting_free") return BlockState::ActivePendingFree;
  if (s == "inactive") return BlockState::Inactive;
  return BlockState::Unknown;
}

// `budget` counts the values still allowed: a dict that holds itself (through the memo) has
// 2^depth paths, and an ordered object's key lookup is linear, so the copy stops at
// limits::kMaxCopiedJsonValues values with "<truncated>".
nlohmann::ordered_json to_json(const Value& v, const Document& doc, int depth, std::size_t& budget) {
  if (depth > 64) return "<nested too deep>";
  if (budget == 0) return "<truncated>";
  --budget;
  switch (v.kind) {
    case Kind::None: return nullptr;
    case Kind::Bool: return v.i != 0;
    case Kind::Int: return v.i;
    case Kind::UInt: return v.u;
    case Kind::BigInt: return "<int wider than 64 bits>";
    case Kind::Float: return v.f;
    case Kind::Str: case Kind::Bytes: return std::string(v.str());
    case Kind::Dict: {
      auto obj = nlohmann::ordered_json::object();
      for_each_pair(doc, v, [&](std::string_view key, const Value& val) { obj[std::string(key)] = to_json(val, doc, depth + 1, budget); });
      return obj;
    }
    case Kind::List: case Kind::Tuple: case Kind::Set: {
      auto arr = nlohmann::ordered_json::array();
      for (const Value& item : doc.items(v)) arr.push_back(to_json(item, doc, depth + 1, budget));
      return arr;
    }
    case Kind::Interned: case Kind::Released: return "<shared object>";
  }
  return nullptr;
}

// A value (settings, annotations) as compact JSON; invalid UTF-8 is replaced.
std::string value_to_json(const Value& v, const Document& doc) {
  std::size_t budget = limits::kMaxCopiedJsonValues;
  return to_json(v, doc, 0, budget).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

SnapshotBuilder::SnapshotBuilder(Snapshot& snapshot, std::uint64_t max_trace_events, std::uint64_t input_bytes)
    : snap_(snapshot), events_(snapshot, max_trace_events), input_bytes_(input_bytes) {
  constexpr std::uint64_t kMinModelBudget = 32ull << 20;
  model_budget_ = input_bytes == 0 ? ~std::uint64_t(0) : std::max(kMinModelBudget, 2 * input_bytes);
  snap_.strings.clear();
  intern("");
}

// A block costs PyTorch's pickler at least ~35 bytes (a fresh dict of five keys) and the model
// 40, annotations and segments more on both sides: only objects written once and referenced
// many times through the memo make the model outgrow twice the input.
void SnapshotBuilder::grow_model(std::uint64_t bytes, const char* what) {
  model_bytes_ += bytes;
  if (model_bytes_ <= model_budget_) [[likely]] return;
  throw InputError(fmt::format("the snapshot's {} expand to more than {} MiB in memory from a file of {} bytes (one object "
                               "referenced again and again through the pickle memo), which PyTorch never writes",
                               what, model_budget_ >> 20, input_bytes_),
                   kRecaptureRemedy);
}

StrId SnapshotBuilder::intern(std::string_view s) {
  if (auto it = string_index_.find(s); it != string_index_.end()) return it->second;
  const auto id = static_cast<StrId>(snap_.strings.size());
  snap_.strings.emplace_back(s);
  string_index_.emplace(std::string(s), id);
  return id;
}

FrameId SnapshotBuilder::frame_of(const Value& v, const Document& doc) {
  if (v.kind == Kind::Interned && v.aux == kFrameTag) return static_cast<FrameId>(v.u);
  if (v.kind != Kind::Dict) bad_field("a stack frame", v, "a dict with filename, name and line");
  if (v.index < frame_cache_.size() && frame_cache_[v.index]) return frame_cache_[v.index] - 1;
  Frame f;
  FxKeys fx;
  for_each_pair(doc, v, [&](std::string_view key, const Value& val) {
    switch (const FrameDictKey field = field_of(frame_keys(), key)) {
      case FrameDictKey::Filename: if (val.is_str()) f.filename = intern(val.str()); break;
      case FrameDictKey::Name: if (val.is_str()) f.name = intern(val.str()); break;
      case FrameDictKey::Line: if (val.kind == Kind::Int || val.kind == Kind::UInt) f.line = val.as_int(); break;
      case FrameDictKey::Unknown: break;
      default: fx.note(field, val); break;
    }
  });
  const FrameId id = intern_frame(f);
  if (fx.any) note_fx_frame(id, fx);
  if (v.index >= frame_cache_.size()) frame_cache_.resize(std::max<std::size_t>(v.index + 1, frame_cache_.size() * 2), 0);
  frame_cache_[v.index] = id + 1;
  frame_cache_used_ = std::max<std::size_t>(frame_cache_used_, v.index + 1);
  return id;
}

StackId SnapshotBuilder::stack_of(const Value& v, const Document& doc, const char* where) {
  if (v.kind == Kind::Interned && v.aux == kStackTag) return static_cast<StackId>(v.u);
  if (v.kind == Kind::None) return kNoStack;
  if (v.kind != Kind::List && v.kind != Kind::Tuple) bad_field(where, v, "a list of frames");
  if (v.index < stack_cache_.size() && stack_cache_[v.index]) return stack_cache_[v.index] - 1;
  // A list whose items are an earlier list's (Document::share_items: the blocks' frames lists,
  // and the trace entries naming them) has that list's stack: the shared chunks stay unchanged
  // while they are shared, and are never released (sharing happens outside streamed batches).
  const Container& c = doc.container(v);
  if (c.shared) {
    if (const auto it = shared_stacks_.find(c.first_chunk); it != shared_stacks_.end()) return it->second;
  }
  scratch_.clear();
  for (const Value& item : doc.items(v)) scratch_.push_back(frame_of(item, doc));
  StackId id = kNoStack;
  if (!scratch_.empty()) id = intern_stack(scratch_.data(), scratch_.size());
  if (c.shared) shared_stacks_.emplace(c.first_chunk, id);
  if (v.index >= stack_cache_.size()) stack_cache_.resize(std::max<std::size_t>(v.index + 1, stack_cache_.size() * 2), 0);
  stack_cache_[v.index] = id + 1;
  stack_cache_used_ = std::max<std::size_t>(stack_cache_used_, v.index + 1);
  return id;
}

StackId SnapshotBuilder::intern_stack(const FrameId* ids, std::size_t count) {
  if (!snap_.fx_frames.empty() && !expanding_fx_) [[unlikely]] return intern_fx_stack(ids, count);
  // absl's hash takes the ids as bytes, many at a time (FNV over each id was a chain of one
  // multiply per frame); ids come from first occurrence, so the hash never shows in a report.
  const std::uint64_t h = absl::HashOf(absl::MakeConstSpan(ids, count));
  auto same = [&](StackId candidate) {
    return snap_.stack_size(candidate) == count && std::equal(ids, ids + count, snap_.stack_begin(candidate));
  };
  const auto [it, inserted] = stack_index_.try_emplace(h, static_cast<StackId>(snap_.stack_count()));
  if (!inserted) {
    if (same(it->second)) return it->second;
    auto [first, last] = stack_collisions_.equal_range(h);
    for (auto c = first; c != last; ++c) {
      if (same(c->second)) return c->second;
    }
    stack_collisions_.emplace(h, static_cast<StackId>(snap_.stack_count()));
  }
  const auto id = static_cast<StackId>(snap_.stack_count());
  snap_.stack_frames.insert(snap_.stack_frames.end(), ids, ids + count);
  snap_.stack_offsets.push_back(static_cast<std::uint32_t>(snap_.stack_frames.size()));
  return id;
}

std::optional<Value> SnapshotBuilder::converted(std::uint64_t index) {
  if (index < stack_cache_.size() && stack_cache_[index]) return Value::interned(kStackTag, stack_cache_[index] - 1);
  if (index < frame_cache_.size() && frame_cache_[index]) return Value::interned(kFrameTag, frame_cache_[index] - 1);
  return std::nullopt;
}

// Clears the cache entries of released containers: only up to the highest entry ever set.
void SnapshotBuilder::released(std::uint64_t first) {
  auto clear = [first](std::vector<std::uint32_t>& cache, std::size_t& used) {
    if (first >= used) return;
    std::fill(cache.begin() + static_cast<std::ptrdiff_t>(first), cache.begin() + static_cast<std::ptrdiff_t>(used), 0);
    used = first;
  };
  clear(stack_cache_, stack_cache_used_);
  clear(frame_cache_, frame_cache_used_);
}

void SnapshotBuilder::count_unknown(const char* object, std::string_view key) {
  ++snap_.unknown_keys[fmt::format("{}.{}", object, key)];
}

TraceField SnapshotBuilder::trace_field(std::string_view key) { return field_of(trace_entry_keys(), key); }

// Trace-entry keys by identity: PyTorch files repeat the same memoized key strings, so the
// string's address decides without comparing bytes; a miss compares and refills the slot.
TraceField SnapshotBuilder::trace_key(const Value& key) {
  if (key.kind != Kind::Str) return TraceField::Unknown;
  KeyCacheEntry& slot = key_cache_[(reinterpret_cast<std::uintptr_t>(key.s) >> 3) & 63];
  if (slot.data == key.s && slot.size == key.aux) return slot.key;
  const TraceField id = trace_field(key.str());
  slot = {key.s, key.aux, id};
  return id;
}

// Action strings by identity, like trace keys (PyTorch memoizes one str per action).
Action SnapshotBuilder::action_of(const Value& v) {
  ActionCacheEntry& slot = action_cache_[(reinterpret_cast<std::uintptr_t>(v.s) >> 3) & 15];
  if (slot.data == v.s && slot.size == v.aux) return slot.action;
  const Action action = parse_action(v.str());
  slot = {v.s, v.aux, action};
  return action;
}

void SnapshotBuilder::trace_entry(std::size_t device, const Value& entry, const Document& doc) {
  if (entry.kind != Kind::Dict) {
    bad_field(fmt::format("device_traces[{}][{}]", device, events_.entries(device)), entry, "a dict");
  }
  pairs_.clear();
  for (const Value& v : doc.items(entry)) pairs_.push_back(v);
  trace_entry_fields(device, pairs_.data(), pairs_.size() & ~std::size_t(1), doc);
}

// Checks each field's type (the typed fast path only passes entries that would pass these
// checks) and counts unknown keys.
void SnapshotBuilder::trace_entry_fields(std::size_t device, const Value* pairs, std::size_t count, const Document& doc) {
  TraceFields f;
  for (std::size_t k = 0; k + 1 < count; k += 2) {
    const Value& v = pairs[k + 1];
    const TraceField field = trace_key(pairs[k]);
    switch (field) {
      case TraceField::Action:
        if (!v.is_str()) bad_field("a trace entry's action", v, "a str");
        f.action = v;
        break;
      case TraceField::Addr: f.addr = static_cast<std::uint64_t>(as_int(v, "a trace entry's addr")); break;
      case TraceField::Size: f.size = as_size(v, "a trace entry's size"); break;
      case TraceField::Stream: f.stream = as_int(v, "a trace entry's stream"); break;
      case TraceField::Time:
        f.time_us = as_int(v, "a trace entry's time_us");
        f.has_time = true;
        break;
      case TraceField::Frames: f.frames = v; break;
      case TraceField::PoolId: case TraceField::UserMetadata: case TraceField::CompileContext:
      case TraceField::InternalMetadata: case TraceField::ForwardFrames: case TraceField::Category:
        f.extra[extra_slot(field)] = v;
        break;
      case TraceField::Ignored: break;
      case TraceField::Unknown:
        count_unknown("trace_entry", pairs[k].kind == Kind::Str ? pairs[k].str() : std::string_view("<non-str key>"));
        break;
    }
  }
  trace_fields(device, f, doc);
}

void SnapshotBuilder::trace_fields(std::size_t device, const TraceFields& f, const Document& doc) {
  TraceEvent e;
  if (f.action.kind == Kind::Str) {
    e.action = action_of(f.action);
    if (e.action == Action::Unknown) ++snap_.unknown_actions[std::string(f.action.str())];
  }
  e.addr = f.addr;
  e.size = f.size;
  if (f.stream != last_stream_) {
    last_stream_ = f.stream;
    last_stream_id_ = snap_.stream_id(f.stream);
  }
  e.stream_id = last_stream_id_;
  e.time_us = f.time_us;
  e.has_time = f.has_time;
  e.stack = f.frames.kind == Kind::Interned && f.frames.aux == kStackTag ? static_cast<StackId>(f.frames.u)
                                                                          : stack_of(f.frames, doc, "a trace entry's frames");
  if (!plainly_no_event_facts(f)) e.stack = note_event_facts(device, f, doc, e.stack);
  events_.add(device, e);
}

Value SnapshotBuilder::intern_frame_ids(const std::uint32_t* ids, std::size_t count) {
  return Value::interned(kStackTag, count == 0 ? kNoStack : intern_stack(ids, count));
}

void SnapshotBuilder::finish(const Document& doc) {
  const Value& root = doc.root;
  if (root.kind == Kind::List) {
    snap_.top_level_list = true;
    read_segments(root, doc);
  } else if (root.kind == Kind::Dict) {
    read_root_dict(doc);
  } else {
    throw InputError(fmt::format("the file holds a {}, not a memory snapshot (expected a dict with 'segments' or a "
                                 "list of segments)",
                                 kind_name(root.kind)),
                     "pass the file written by torch.cuda.memory._dump_snapshot() (run `memsnap capture`)");
  }
  events_.finish();
  tag_allocations();
}

void SnapshotBuilder::read_root_dict(const Document& doc) {
  bool any_known = false;
  for_each_pair(doc, doc.root, [&](std::string_view key, const Value& v) {
    switch (field_of(root_keys(), key)) {
      case RootKey::Segments:
        any_known = true;
        read_segments(v, doc);
        break;
      case RootKey::DeviceTraces:
        any_known = true;
        snap_.has_device_traces_key = true;
        read_traces(v, doc);
        break;
      case RootKey::AllocatorSettings: read_settings(v, doc); break;
      case RootKey::ExternalAnnotations: read_annotations(v, doc); break;
      case RootKey::HostSegments: read_host_segments(v, doc); break;
      case RootKey::HostTraces: read_host_traces(v, doc); break;
      case RootKey::Ignored: break;
      case RootKey::Unknown: count_unknown("snapshot", key); break;
    }
  });
  if (!any_known) {
    throw InputError("the file holds a dict without 'segments' or 'device_traces', so it is not a CUDA memory snapshot",
                     "pass the file written by torch.cuda.memory._dump_snapshot() (run `memsnap capture`)");
  }
}

void SnapshotBuilder::read_traces(const Value& list, const Document& doc) {
  if (list.kind != Kind::List) bad_field("device_traces", list, "a list of per-device lists");
  std::size_t device = 0;
  for (const Value& per_device : doc.items(list)) {
    events_.ensure_device(device);  // devices with an empty (or streamed) list still count
    if (per_device.kind != Kind::List) bad_field(fmt::format("device_traces[{}]", device), per_device, "a list");
    for (const Value& entry : doc.items(per_device)) trace_entry(device, entry, doc);
    ++device;
  }
}

void SnapshotBuilder::read_segments(const Value& list, const Document& doc) {
  if (list.kind != Kind::List) bad_field("segments", list, "a list");
  std::size_t index = 0;
  for (const Value& seg : doc.items(list)) read_segment(seg, doc, index++);
}

void SnapshotBuilder::read_segment(const Value& dict, const Document& doc, std::size_t index) {
  const std::string where = fmt::format("segments[{}]", index);
  if (dict.kind != Kind::Dict) bad_field(where, dict, "a dict");
  grow_model(sizeof(Segment), "segments");
  Segment seg;
  seg.first_block = static_cast<std::uint32_t>(snap_.blocks.size());
  bool has_total = false;
  const Value* blocks = nullptr;
  for_each_pair(doc, dict, [&](std::string_view key, const Value& v) {
    switch (field_of(segment_keys(), key)) {
      case SegmentKey::Device: seg.device = as_int(v, "a segment's device"); break;
      case SegmentKey::Address: seg.address = static_cast<std::uint64_t>(as_int(v, "a segment's address")); break;
      case SegmentKey::TotalSize:
        seg.total_size = as_size(v, "a segment's total_size");
        has_total = true;
        break;
      case SegmentKey::AllocatedSize: seg.allocated_size = as_size(v, "a segment's allocated_size"); break;
      case SegmentKey::ActiveSize: seg.active_size = as_size(v, "a segment's active_size"); break;
      case SegmentKey::RequestedSize: seg.requested_size = as_size(v, "a segment's requested_size"); break;
      case SegmentKey::Stream: seg.stream = as_int(v, "a segment's stream"); break;
      case SegmentKey::SegmentType: seg.is_large = !(v.is_str() && v.str() == "small"); break;
      case SegmentKey::IsExpandable: seg.is_expandable = v.kind == Kind::Bool && v.i != 0; break;
      case SegmentKey::Frames: seg.stack = stack_of(v, doc, "a segment's frames"); break;
      case SegmentKey::Blocks: blocks = &v; break;
      case SegmentKey::PoolId: read_pool_id(v, doc, seg); break;
      case SegmentKey::ForwardFrames: seg.forward_stack = traceback_stack(v, doc); break;
      case SegmentKey::Unknown: count_unknown("segment", key); break;
    }
  });
  if (!blocks) throw InputError(fmt::format("{} has no 'blocks' list", where), kRecaptureRemedy);
  if (blocks->kind != Kind::List) bad_field(where + ".blocks", *blocks, "a list");
  std::uint64_t next_address = seg.address;
  std::uint64_t block_total = 0;
  for (const Value& b : doc.items(*blocks)) {
    grow_model(sizeof(Block), "segment blocks");
    read_block(b, doc, next_address);
    block_total += snap_.blocks.back().size;
  }
  seg.block_count = static_cast<std::uint32_t>(snap_.blocks.size() - seg.first_block);
  if (!has_total) seg.total_size = block_total;
  snap_.segments.push_back(seg);
}

void SnapshotBuilder::read_block(const Value& dict, const Document& doc, std::uint64_t& next_address) {
  if (dict.kind != Kind::Dict) bad_field("a block", dict, "a dict");
  Block b;
  bool has_address = false, has_requested = false, has_size = false, has_state = false;
  const Value* history = nullptr;
  StackId forward = kNoStack;
  for_each_pair(doc, dict, [&](std::string_view key, const Value& v) {
    switch (field_of(block_keys(), key)) {
      case BlockKey::Address:
        b.address = static_cast<std::uint64_t>(as_int(v, "a block's address"));
        has_address = true;
        break;
      case BlockKey::Size:
        b.size = as_size(v, "a block's size");
        has_size = true;
        break;
      case BlockKey::RequestedSize:
        b.requested_size = as_size(v, "a block's requested_size");
        has_requested = true;
        break;
      case BlockKey::State:
        if (!v.is_str()) bad_field("a block's state", v, "a str");
        b.state = parse_state(v.str());
        if (b.state == BlockState::Unknown) count_unknown("block.state", v.str());
        has_state = true;
        break;
      case BlockKey::Frames: b.stack = stack_of(v, doc, "a block's frames"); break;
      case BlockKey::History: history = &v; break;
      case BlockKey::ForwardFrames: forward = traceback_stack(v, doc); break;
      case BlockKey::Ignored: break;
      case BlockKey::Unknown: count_unknown("block", key); break;
    }
  });
  if (!has_size) throw InputError("a block has no 'size'", kRecaptureRemedy);
  if (!has_state) throw InputError("a block has no 'state'", kRecaptureRemedy);
  if (!has_address) b.address = next_address;
  next_address = b.address + b.size;
  if (history && history->kind == Kind::List && doc.size(*history) > 0) {
    const Value& first = *doc.items(*history).begin();
    if (first.kind == Kind::Dict) {
      b.from_history = true;
      for_each_pair(doc, first, [&](std::string_view key, const Value& v) {
        if (key == "frames") b.stack = stack_of(v, doc, "a block's history frames");
        else if (key == "real_size" && !has_requested) { b.requested_size = as_size(v, "a history real_size"); has_requested = true; }
      });
    }
  }
  if (!has_requested) b.requested_size = b.size;
  if (forward != kNoStack && !reading_host_) {
    snap_.block_forward_stacks.emplace_back(static_cast<std::uint32_t>(snap_.blocks.size()), forward);
    b.stack = with_forward(forward, b.stack);
  }
  snap_.blocks.push_back(b);
}

void SnapshotBuilder::read_settings(const Value& dict, const Document& doc) {
  if (dict.kind != Kind::Dict) bad_field("allocator_settings", dict, "a dict");
  AllocatorSettings& s = snap_.settings;
  s.present = true;
  for_each_pair(doc, dict, [&](std::string_view key, const Value& v) {
    if (key == "max_split_size" && v.get_int()) s.max_split_size = *v.get_int();
    else if (key == "expandable_segments" && v.kind == Kind::Bool) s.expandable_segments = v.i != 0;
    else if ((key == "PYTORCH_CUDA_ALLOC_CONF" || key == "PYTORCH_ALLOC_CONF") && v.is_str()) s.conf = std::string(v.str());
    else if (key == "roundup_power2_divisions") read_roundup_divisions(v, doc, s);
  });
  s.json = value_to_json(dict, doc);
}

void SnapshotBuilder::read_annotations(const Value& list, const Document& doc) {
  if (list.kind != Kind::List) bad_field("external_annotations", list, "a list");
  for (const Value& entry : doc.items(list)) {
    if (entry.kind != Kind::Dict) continue;
    Annotation a;
    for_each_pair(doc, entry, [&](std::string_view key, const Value& v) {
      if (key == "device") a.device = v.as_int(-1);
      else if (key == "time_us") a.time_us = v.as_int();
      else if (key == "name" && v.is_str()) a.name = std::string(v.str());
      else if (key == "stage" && v.is_str()) a.stage = std::string(v.str());
    });
    a.json = value_to_json(entry, doc);
    grow_model(sizeof(Annotation) + a.name.size() + a.stage.size() + a.json.size(), "external_annotations");
    snap_.annotations.push_back(std::move(a));
  }
}

}  // namespace memsnap
