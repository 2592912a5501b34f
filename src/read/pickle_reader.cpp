// The pickle VM: a stack, a memo and marks over the value arena. Only data opcodes are executed;
// every opcode that would import, construct or call anything is refused with its byte offset.
// device_traces lists are streamed to a TraceEntrySink batch by batch (see pickle_reader.h).
#include "read/pickle_reader.h"

#include "read/pickle_opcodes.h"
#include "read/pickle_vm.h"

#include <cstring>
#include <fmt/format.h>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/limits.h"

namespace memsnap {
namespace {

constexpr const char* kNotSnapshotRemedy =
    "memsnap reads only plain-data snapshot pickles; do not unpickle this file, and capture a snapshot "
    "with torch.cuda.memory._dump_snapshot() (run `memsnap capture`)";

}  // namespace

namespace pickle_vm {

void PickleVm::append_to(const Value& container, const Value* items, std::size_t count) {
  // Modifying a container older than a streaming mark pins that batch in the arena.
  for (auto& m : marks_) {
    if (m.device >= 0 && container.index < m.arena.containers) m.dirty = true;
  }
  doc_.append(container, items, count);
}

Value PickleVm::make_from(Kind kind, std::size_t from) {
  Value c = doc_.new_container(kind);
  append_to(c, stack_.data() + from, stack_.size() - from);
  stack_.resize(from);
  return c;
}

std::size_t PickleVm::innermost_mark_at_or_below(std::size_t p, bool& found) const {
  for (auto it = marks_.rbegin(); it != marks_.rend(); ++it) {
    if (it->pos <= p) {
      found = true;
      return it->pos;
    }
  }
  found = false;
  return 0;
}

// True when stack_[p] is the value for `key` among the root dict's pending SETITEMS items.
bool PickleVm::is_root_value(std::size_t p, std::string_view key) const {
  bool found = false;
  const std::size_t m = innermost_mark_at_or_below(p, found);
  if (!found || m != 1 || stack_[0].kind != Kind::Dict || p < 2 || (p - m) % 2 != 1) return false;
  return stack_[p - 1].kind == Kind::Str && stack_[p - 1].str() == key;
}

// The device index when stack_[p] is the list device_traces[d], else -1.
int PickleVm::trace_device_of(std::size_t p) const {
  if (stack_[p].kind != Kind::List || p < 1) return -1;
  // A single device: the list waits for APPEND right above the device_traces list.
  if (stack_[p - 1].kind == Kind::List && is_root_value(p - 1, "device_traces")) {
    return static_cast<int>(doc_.size(stack_[p - 1]));
  }
  bool found = false;
  const std::size_t m = innermost_mark_at_or_below(p, found);
  if (!found || m < 1 || stack_[m - 1].kind != Kind::List || !is_root_value(m - 1, "device_traces")) return -1;
  return static_cast<int>(doc_.size(stack_[m - 1]) + (p - m));
}

// Hands a batch of device_traces[d] entries to the sink and drops them from the arena.
void PickleVm::stream_batch(const MarkInfo& mark) {
  for (std::size_t k = mark.pos; k < stack_.size(); ++k) {
    sink_->trace_entry(static_cast<std::size_t>(mark.device), stack_[k], doc_);
  }
  info_.streamed_entries += stack_.size() - mark.pos;
  stack_.resize(mark.pos);
  if (mark.dirty) return;
  // Slots written since the mark can name only containers made since it: with none made (the
  // fast paths memoize strs, stacks and released dicts), there is nothing to convert, and the walk
  // over the batch's slots (three an entry of a Python-only trace, 3% of its read) is skipped.
  if (doc_.mark().containers > mark.arena.containers) {
    for (std::size_t k = mark.memo; k < memo_.size(); ++k) {
      const Value& slot = memo_[k];
      if (!slot.is_container() || slot.index < mark.arena.containers) continue;
      auto converted = sink_->converted(slot.index);
      if (converted) memo_.set_converted(k, *converted);
      else memo_.set(k, Value::released());
    }
  }
  sink_->released(mark.arena.containers);
  doc_.release_to(mark.arena);
  released_any_ = true;
}

void PickleVm::push_long(const std::uint8_t* b, std::size_t n) {
  if (n == 0) return push(Value::integer(0));
  const bool negative = (b[n - 1] & 0x80) != 0;
  // Strip redundant sign-extension bytes so 9-byte encodings of 64-bit values fit.
  std::size_t len = n;
  while (len > 1 && b[len - 1] == (negative ? 0xff : 0x00) && (((b[len - 2] & 0x80) != 0) == negative)) --len;
  if (len <= 8) {
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < len; ++k) v |= std::uint64_t(b[k]) << (8 * k);
    if (negative && len < 8) v |= ~std::uint64_t(0) << (8 * len);
    return push(Value::integer(static_cast<std::int64_t>(v)));
  }
  if (len == 9 && !negative && b[8] == 0) {
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < 8; ++k) v |= std::uint64_t(b[k]) << (8 * k);
    return push(Value::uinteger(v));
  }
  push(Value::big_integer());
}

PickleInfo PickleVm::run() {
  if (size_ < 2 || data_[0] != 0x80) {
    throw InputError("not a pickle of protocol 2 or later (no PROTO opcode at byte 0)", kNotSnapshotRemedy);
  }
  advance_pager();
  maybe_start_early_split();
  while (!stopped_) {
    if (pos_ >= size_) truncated();
    advance_pager();
    op_pos_ = pos_;
    op_ = data_[pos_++];
    dispatch();
  }
  if (stack_.empty()) corrupt("STOP with an empty stack");
  doc_.root = stack_.back();
  info_.stop_offset = op_pos_;
  info_.trailing_bytes = size_ - pos_;
  info_.memo_entries = memo_.count();
  return info_;
}

void PickleVm::dispatch() {
  switch (op_) {
    case op::kProto: {
      const auto v = read_le(1);
      if (v < 2 || v > 5) corrupt(fmt::format("unsupported pickle protocol {} (memsnap reads protocols 2-5)", v));
      info_.protocol = static_cast<int>(v);
      return;
    }
    case op::kFrame: {  // a framing hint; no FRAME opcode can occur before its end
      const auto length = read_le(8);
      frame_end_ = length > size_ - pos_ ? size_ : pos_ + static_cast<std::size_t>(length);
      return;
    }
    case op::kStop: stopped_ = true; return;
    case op::kMark: {
      if (marks_.size() >= limits::kMaxNestingDepth) {
        corrupt(fmt::format("nesting deeper than memsnap's limit of {}", limits::kMaxNestingDepth));
      }
      MarkInfo m;
      m.pos = stack_.size();
      if (sink_ && !stack_.empty()) {
        m.device = trace_device_of(stack_.size() - 1);
        if (m.device >= 0) {
          m.arena = doc_.mark();
          m.memo = memo_.size();
        }
      }
      if (next_split_ < splits_.size() && adopt_splits(m)) return;  // batches a thread decoded follow
      if (m.device >= 0 && !split_tried_ && split_tuning_.enabled) [[unlikely]] maybe_start_split();
      marks_.push_back(m);
      return;
    }
    case op::kEmptyDict:
      if (fast_path_open() && try_fast_entry()) {
        continue_fast_entries();
        return;
      }
      push(doc_.new_container(Kind::Dict));
      return;
    case op::kEmptyList:
      if (!try_reference_list()) push(doc_.new_container(Kind::List));
      return;
    case op::kEmptyTuple: push(doc_.new_container(Kind::Tuple)); return;
    case op::kEmptySet: push(doc_.new_container(Kind::Set)); return;
    case op::kNone: push(Value::none()); return;
    case op::kNewTrue: push(Value::boolean(true)); return;
    case op::kNewFalse: push(Value::boolean(false)); return;
    case op::kBinInt1: push(Value::integer(static_cast<std::int64_t>(read_le(1)))); return;
    case op::kBinInt2: push(Value::integer(static_cast<std::int64_t>(read_le(2)))); return;
    case op::kBinInt: push(Value::integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(read_le(4))))); return;
    case op::kLong1: {
      const auto n = read_le(1);
      const auto* b = reinterpret_cast<const std::uint8_t*>(take(n));
      push_long(b, n);
      return;
    }
    case op::kLong4: {
      const auto n = static_cast<std::int32_t>(static_cast<std::uint32_t>(read_le(4)));
      if (n < 0) corrupt("LONG4 with a negative length");
      if (static_cast<std::size_t>(n) > limits::kMaxIntBytes) {
        take(static_cast<std::uint64_t>(n));
        push(Value::big_integer());
        return;
      }
      const auto* b = reinterpret_cast<const std::uint8_t*>(take(static_cast<std::uint64_t>(n)));
      push_long(b, static_cast<std::size_t>(n));
      return;
    }
    case op::kBinFloat: {  // big-endian
      const auto raw = read_le(8);
      std::uint64_t be = __builtin_bswap64(raw);
      double d;
      std::memcpy(&d, &be, sizeof d);
      push(Value::real(d));
      return;
    }
    case op::kShortBinUnicode: { const auto n = read_le(1); push(Value::string(take(n), static_cast<std::uint32_t>(n))); return; }
    case op::kBinUnicode: { const auto n = read_le(4); push(Value::string(take(n), static_cast<std::uint32_t>(n))); return; }
    case op::kBinUnicode8: { const auto n = read_le(8); push(Value::string(take(n), static_cast<std::uint32_t>(n))); return; }
    case op::kShortBinBytes: case op::kShortBinString: { const auto n = read_le(1); push(Value::string(take(n), static_cast<std::uint32_t>(n), Kind::Bytes)); return; }
    case op::kBinBytes: case op::kBinString: { const auto n = read_le(4); push(Value::string(take(n), static_cast<std::uint32_t>(n), Kind::Bytes)); return; }
    case op::kBinBytes8: case op::kByteArray8: { const auto n = read_le(8); push(Value::string(take(n), static_cast<std::uint32_t>(n), Kind::Bytes)); return; }
    case op::kMemoize: memo_put(memo_.count(), top()); return;  // at len(memo), as Python does
    case op::kBinPut: { const auto i = read_le(1); memo_put(i, top()); return; }
    case op::kLongBinPut: { const auto i = read_le(4); memo_put(i, top()); return; }
    case op::kBinGet: memo_get(read_le(1)); return;
    case op::kLongBinGet: memo_get(read_le(4)); return;
    case op::kPop: {  // drops the top item, or a mark with nothing above it
      if (!marks_.empty() && marks_.back().pos == stack_.size()) pop_mark();
      else pop();
      return;
    }
    case op::kPopMark: { const MarkInfo m = pop_mark(); stack_.resize(m.pos); return; }
    case op::kDup: push(top()); return;
    case op::kTuple1: case op::kTuple2: case op::kTuple3: {
      const std::size_t n = op_ - op::kTuple1 + 1u;
      if (stack_.size() < floor() + n) corrupt(fmt::format("{} needs {} values", op_name(), n));
      push(make_from(Kind::Tuple, stack_.size() - n));
      return;
    }
    case op::kTuple: { const MarkInfo m = pop_mark(); push(make_from(Kind::Tuple, m.pos)); return; }
    case op::kList: { const MarkInfo m = pop_mark(); push(make_from(Kind::List, m.pos)); return; }
    case op::kFrozenSet: { const MarkInfo m = pop_mark(); push(make_from(Kind::Set, m.pos)); return; }
    case op::kDict: {
      const MarkInfo m = pop_mark();
      if ((stack_.size() - m.pos) % 2 != 0) corrupt("DICT with an odd number of items");
      push(make_from(Kind::Dict, m.pos));
      return;
    }
    case op::kAppend: {
      const Value item = pop();
      const Value& list = top();
      if (list.kind != Kind::List) corrupt(fmt::format("APPEND to a {}", kind_name(list.kind)));
      const int device = sink_ ? trace_device_of(stack_.size() - 1) : -1;
      if (device >= 0) {
        sink_->trace_entry(static_cast<std::size_t>(device), item, doc_);
        ++info_.streamed_entries;
      } else {
        append_to(list, &item, 1);
      }
      return;
    }
    case op::kAppends: case op::kAddItems: {
      const MarkInfo m = pop_mark();
      if (m.pos == 0) corrupt(fmt::format("{} with nothing to add to", op_name()));
      const Value target = stack_[m.pos - 1];
      const Kind want = op_ == op::kAppends ? Kind::List : Kind::Set;
      if (target.kind != want) corrupt(fmt::format("{} to a {}", op_name(), kind_name(target.kind)));
      if (m.device >= 0) {
        stream_batch(m);
        return;
      }
      append_to(target, stack_.data() + m.pos, stack_.size() - m.pos);
      stack_.resize(m.pos);
      return;
    }
    case op::kSetItem: {
      if (stack_.size() < floor() + 3) corrupt("SETITEM needs a dict, a key and a value");
      const Value& dict = stack_[stack_.size() - 3];
      if (dict.kind != Kind::Dict) corrupt(fmt::format("SETITEM on a {}", kind_name(dict.kind)));
      append_to(dict, stack_.data() + stack_.size() - 2, 2);
      stack_.resize(stack_.size() - 2);
      return;
    }
    case op::kSetItems: {
      const MarkInfo m = pop_mark();
      if (m.pos == 0) corrupt("SETITEMS with no dict below the MARK");
      const Value dict = stack_[m.pos - 1];
      if (dict.kind != Kind::Dict) corrupt(fmt::format("SETITEMS on a {}", kind_name(dict.kind)));
      if ((stack_.size() - m.pos) % 2 != 0) corrupt("SETITEMS with an odd number of items");
      append_to(dict, stack_.data() + m.pos, stack_.size() - m.pos);
      stack_.resize(m.pos);
      return;
    }
    default: refuse(); return;
  }
}

// An opcode dispatch does not execute: refused, a text-protocol opcode, or no opcode at all.
void PickleVm::refuse() const {
  const PickleOpcode* opcode = pickle_opcode(op_);
  if (!opcode) corrupt(fmt::format("unknown opcode byte 0x{:02x}", op_));
  if (opcode->use == OpUse::kRefused) {
    throw InputError(fmt::format("refusing pickle opcode {} at byte {}: it would import, construct or call Python "
                                 "objects, which a memory snapshot never does",
                                 opcode->name, op_pos_),
                     kNotSnapshotRemedy);
  }
  throw InputError(fmt::format("unsupported pickle opcode {} at byte {} (a text-protocol opcode that "
                               "PyTorch snapshots never contain)",
                               opcode->name, op_pos_),
                   kNotSnapshotRemedy);
}

}  // namespace pickle_vm

const PickleOpcode* pickle_opcode(std::uint8_t byte) {
  for (const PickleOpcode& opcode : kPickleOpcodes) {
    if (opcode.byte == byte) return &opcode;
  }
  return nullptr;
}

const char* pickle_opcode_name(std::uint8_t byte) {
  const PickleOpcode* opcode = pickle_opcode(byte);
  return opcode ? opcode->name : nullptr;
}

PickleInfo read_pickle(std::span<const std::uint8_t> bytes, Document& doc, TraceEntrySink* sink, bool drop_pages,
                       const SplitTuning& split) {
  pickle_vm::PickleVm vm(bytes, doc, sink, drop_pages);
  vm.set_split_tuning(split);
  return vm.run();
}

}  // namespace memsnap
