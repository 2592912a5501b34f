// A data-only pickle reader: protocols 2-5, no object construction, no code execution.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "read/split_trace.h"
#include "read/value.h"

namespace memsnap {

// The fields memsnap keeps from a trace entry, as named by its keys.
// PoolId .. Category are kept as read (TraceFields::extra) for the builder to interpret.
enum class TraceField : std::uint8_t {
  Action, Addr, Size, Stream, Time, Frames, PoolId, UserMetadata, CompileContext, InternalMetadata, ForwardFrames,
  Category, Ignored, Unknown
};
static_assert(static_cast<int>(TraceField::Addr) == 1 && static_cast<int>(TraceField::Time) == 4);
inline constexpr unsigned kTraceExtraCount = static_cast<unsigned>(TraceField::Ignored) - static_cast<unsigned>(TraceField::PoolId);
inline constexpr unsigned extra_slot(TraceField f) { return static_cast<unsigned>(f) - static_cast<unsigned>(TraceField::PoolId); }

// One trace entry decoded by the reader's typed fast path: the values of the fields above.
struct TraceFields {
  Value action;                // a str, or None when the entry has no action
  Value frames;                // as read: a stack the sink converted, a list, or None
  std::uint64_t addr = 0;      // addr (or device_free for oom)
  std::uint64_t size = 0;
  std::int64_t stream = 0;
  std::int64_t time_us = 0;
  bool has_time = false;
  Value extra[kTraceExtraCount];  // by extra_slot(field): pool_id, user_metadata, ... (kind None when absent)
};

// An entry whose 2026 fields plainly say nothing, in a few comparisons inline: no extra field
// but compile_context, and that absent or the "N/A" PyTorch writes when there is none (nearly
// every entry of a trace). The builder and the trace split's sink ask it before looking at the
// fields one by one; false does not mean the fields say something. (A call and a string_view ==
// "N/A" took 76 instructions an entry more, 8% of a Python-only trace's read; bench/README §30.)
namespace trace_fields_detail {
inline constexpr unsigned kContextSlot = extra_slot(TraceField::CompileContext);
template <std::size_t... K>
bool only_context_present(const TraceFields& f, std::index_sequence<K...>) {
  return ((K == kContextSlot || f.extra[K].kind == Kind::None) && ...);
}
inline bool is_no_context(const Value& v) {
  if (v.kind == Kind::Str) [[likely]] return v.aux == 3 && v.s[0] == 'N' && v.s[1] == '/' && v.s[2] == 'A';
  return v.kind == Kind::None;
}
}  // namespace trace_fields_detail
inline bool plainly_no_event_facts(const TraceFields& f) {
  using namespace trace_fields_detail;
  return only_context_present(f, std::make_index_sequence<kTraceExtraCount>()) && is_no_context(f.extra[kContextSlot]);
}

// Receives device_traces[d] entries while the file is being read, so that the bulk of a snapshot
// never has to sit in the value arena at once. Implemented by the snapshot builder.
class TraceEntrySink {
 public:
  virtual ~TraceEntrySink() = default;
  // One entry of device_traces[device], in file order.
  virtual void trace_entry(std::size_t device, const Value& entry, const Document& doc) = 0;
  // The same entry given as its key/value pairs (pairs[2k] key, pairs[2k+1] value), as the
  // reader's fast path decodes it without building the dict.
  virtual void trace_entry_fields(std::size_t device, const Value* pairs, std::size_t count, const Document& doc) = 0;
  // What a trace-entry key means (called once per distinct key string and position; Unknown
  // makes the reader hand the entry over as pairs so the key can be counted). It must depend on
  // the key alone: a trace split thread calls it too.
  virtual TraceField trace_field(std::string_view key) = 0;
  // The same entry decoded straight into its fields (PyTorch's usual shape, nearly every entry).
  virtual void trace_fields(std::size_t device, const TraceFields& fields, const Document& doc) = 0;
  // The frame id of one frame value (a frame dict, or a frame this sink converted before); the
  // reader caches it per memo slot, so each frame dict is resolved once.
  virtual std::uint32_t frame_id(const Value& frame, const Document& doc) = 0;
  // Interns a stack from frame ids frame_id returned; the value the memo should hold for the list.
  virtual Value intern_frame_ids(const std::uint32_t* ids, std::size_t count) = 0;
  // Containers with index >= first are about to be dropped. For a memo slot still naming
  // container `index`, return the converted value to keep there (e.g. an interned stack), or
  // nullopt to mark it released.
  virtual std::optional<Value> converted(std::uint64_t index) = 0;
  virtual void released(std::uint64_t first) = 0;
  // Entries of device_traces[device] that a trace split thread decoded (split.events
  // [0, count), read/split_trace.h), to take in file order exactly as trace_fields would have
  // taken them. `slot(n)` is the reader's memo slot n now; `doc` the reader's arena. Fills
  // `stacks` with the value the memo holds for each of the first `stack_count` local stacks (what
  // intern_frame_ids returned for it). False when the sink takes no split events (then the
  // reader decodes those entries itself).
  virtual bool adopt_split(std::size_t device, SplitTrace& split, std::size_t count, std::size_t stack_count,
                           const std::function<const Value&(std::uint64_t)>& slot, const Document& doc,
                           std::vector<Value>& stacks) {
    (void)device, (void)split, (void)count, (void)stack_count, (void)slot, (void)doc, (void)stacks;
    return false;
  }
};

struct PickleInfo {
  int protocol = 0;
  std::size_t stop_offset = 0;     // byte offset of STOP
  std::size_t trailing_bytes = 0;  // bytes after STOP (tolerated)
  std::size_t memo_entries = 0;
  std::size_t streamed_entries = 0;  // trace entries handed to the sink
  std::size_t split_entries = 0;     // of which the trace split's threads decoded
  std::size_t split_parts = 0;       // parts of the trace the reader adopted from them
  std::size_t split_parts_from_start = 0;  // of which threads started with the read (skimmed memo)
};

// Reads one pickle from `bytes` into `doc` (doc.root is set). Throws InputError on anything that
// is not plain data or is malformed. `sink` may be null (then traces stay in the document).
// `drop_pages`: the bytes are a read-only file mapping whose consumed pages may be released.
// `split`: whether and where threads decode parts of a long trace (read/split_trace.h).
PickleInfo read_pickle(std::span<const std::uint8_t> bytes, Document& doc, TraceEntrySink* sink, bool drop_pages = false,
                       const SplitTuning& split = {});

// The opcode's name for messages ("GLOBAL", "REDUCE", ...), or nullptr for unknown bytes.
const char* pickle_opcode_name(std::uint8_t op);

}  // namespace memsnap
