// The pickle VM: a stack, a memo and marks over the value arena. Only data opcodes are executed;
// every opcode that would import, construct or call anything is refused with its byte offset.
// device_traces lists are streamed to a TraceEntrySink batch by batch (see pickle_reader.h).
#include "read/pickle_reader.h"

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

struct OpName {
  std::uint8_t op;
  const char* name;
};
constexpr OpName kOpNames[] = {
    {'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"}, {'F', "FLOAT"},
    {'I', "INT"}, {'J', "BININT"}, {'K', "BININT1"}, {'L', "LONG"}, {'M', "BININT2"}, {'N', "NONE"},
    {'P', "PERSID"}, {'Q', "BINPERSID"}, {'R', "REDUCE"}, {'S', "STRING"}, {'T', "BINSTRING"},
    {'U', "SHORT_BINSTRING"}, {'V', "UNICODE"}, {'X', "BINUNICODE"}, {'a', "APPEND"}, {'b', "BUILD"},
    {'c', "GLOBAL"}, {'d', "DICT"}, {'}', "EMPTY_DICT"}, {'e', "APPENDS"}, {'g', "GET"}, {'h', "BINGET"},
    {'i', "INST"}, {'j', "LONG_BINGET"}, {'l', "LIST"}, {']', "EMPTY_LIST"}, {'o', "OBJ"}, {'p', "PUT"},
    {'q', "BINPUT"}, {'r', "LONG_BINPUT"}, {'s', "SETITEM"}, {'t', "TUPLE"}, {')', "EMPTY_TUPLE"},
    {'u', "SETITEMS"}, {'G', "BINFLOAT"}, {0x80, "PROTO"}, {0x81, "NEWOBJ"}, {0x82, "EXT1"},
    {0x83, "EXT2"}, {0x84, "EXT4"}, {0x85, "TUPLE1"}, {0x86, "TUPLE2"}, {0x87, "TUPLE3"},
    {0x88, "NEWTRUE"}, {0x89, "NEWFALSE"}, {0x8a, "LONG1"}, {0x8b, "LONG4"}, {'B', "BINBYTES"},
    {'C', "SHORT_BINBYTES"}, {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"}, {0x8e, "BINBYTES8"},
    {0x8f, "EMPTY_SET"}, {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"}, {0x95, "FRAME"}, {0x96, "BYTEARRAY8"},
    {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"},
};

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
  for (std::size_t k = mark.memo; k < memo_.size(); ++k) {
    const Value& slot = memo_[k];
    if (!slot.is_container() || slot.index < mark.arena.containers) continue;
    auto converted = sink_->converted(slot.index);
    memo_.set(k, converted ? *converted : Value::released());
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
    case 0x80: {  // PROTO
      const auto v = read_le(1);
      if (v < 2 || v > 5) corrupt(fmt::format("unsupported pickle protocol {} (memsnap reads protocols 2-5)", v));
      info_.protocol = static_cast<int>(v);
      return;
    }
    case 0x95: {  // FRAME: a framing hint; no FRAME opcode can occur before its end
      const auto length = read_le(8);
      frame_end_ = length > size_ - pos_ ? size_ : pos_ + static_cast<std::size_t>(length);
      return;
    }
    case '.': stopped_ = true; return;
    case '(': {
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
      marks_.push_back(m);
      return;
    }
    case '}':
      if (fast_path_open() && try_fast_entry()) {
        continue_fast_entries();
        return;
      }
      push(doc_.new_container(Kind::Dict));
      return;
    case ']': push(doc_.new_container(Kind::List)); return;
    case ')': push(doc_.new_container(Kind::Tuple)); return;
    case 0x8f: push(doc_.new_container(Kind::Set)); return;
    case 'N': push(Value::none()); return;
    case 0x88: push(Value::boolean(true)); return;
    case 0x89: push(Value::boolean(false)); return;
    case 'K': push(Value::integer(static_cast<std::int64_t>(read_le(1)))); return;
    case 'M': push(Value::integer(static_cast<std::int64_t>(read_le(2)))); return;
    case 'J': push(Value::integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(read_le(4))))); return;
    case 0x8a: {  // LONG1
      const auto n = read_le(1);
      const auto* b = reinterpret_cast<const std::uint8_t*>(take(n));
      push_long(b, n);
      return;
    }
    case 0x8b: {  // LONG4
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
    case 'G': {  // BINFLOAT, big-endian
      const auto raw = read_le(8);
      std::uint64_t be = __builtin_bswap64(raw);
      double d;
      std::memcpy(&d, &be, sizeof d);
      push(Value::real(d));
      return;
    }
    case 0x8c: { const auto n = read_le(1); push(Value::string(take(n), static_cast<std::uint32_t>(n))); return; }
    case 'X': { const auto n = read_le(4); push(Value::string(take(n), static_cast<std::uint32_t>(n))); return; }
    case 0x8d: { const auto n = read_le(8); push(Value::string(take(n), static_cast<std::uint32_t>(n))); return; }
    case 'C': case 'U': { const auto n = read_le(1); push(Value::string(take(n), static_cast<std::uint32_t>(n), Kind::Bytes)); return; }
    case 'B': case 'T': { const auto n = read_le(4); push(Value::string(take(n), static_cast<std::uint32_t>(n), Kind::Bytes)); return; }
    case 0x8e: case 0x96: { const auto n = read_le(8); push(Value::string(take(n), static_cast<std::uint32_t>(n), Kind::Bytes)); return; }
    case 0x94: memo_put(memo_.count(), top()); return;  // MEMOIZE: at len(memo), as Python does
    case 'q': { const auto i = read_le(1); memo_put(i, top()); return; }
    case 'r': { const auto i = read_le(4); memo_put(i, top()); return; }
    case 'h': memo_get(read_le(1)); return;
    case 'j': memo_get(read_le(4)); return;
    case '0': {  // POP: drops the top item, or a mark with nothing above it
      if (!marks_.empty() && marks_.back().pos == stack_.size()) pop_mark();
      else pop();
      return;
    }
    case '1': { const MarkInfo m = pop_mark(); stack_.resize(m.pos); return; }  // POP_MARK
    case '2': push(top()); return;  // DUP
    case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
      const std::size_t n = op_ - 0x84u;
      if (stack_.size() < floor() + n) corrupt(fmt::format("{} needs {} values", op_name(), n));
      push(make_from(Kind::Tuple, stack_.size() - n));
      return;
    }
    case 't': { const MarkInfo m = pop_mark(); push(make_from(Kind::Tuple, m.pos)); return; }
    case 'l': { const MarkInfo m = pop_mark(); push(make_from(Kind::List, m.pos)); return; }
    case 0x91: { const MarkInfo m = pop_mark(); push(make_from(Kind::Set, m.pos)); return; }
    case 'd': {
      const MarkInfo m = pop_mark();
      if ((stack_.size() - m.pos) % 2 != 0) corrupt("DICT with an odd number of items");
      push(make_from(Kind::Dict, m.pos));
      return;
    }
    case 'a': {  // APPEND
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
    case 'e': case 0x90: {  // APPENDS, ADDITEMS
      const MarkInfo m = pop_mark();
      if (m.pos == 0) corrupt(fmt::format("{} with nothing to add to", op_name()));
      const Value target = stack_[m.pos - 1];
      const Kind want = op_ == 'e' ? Kind::List : Kind::Set;
      if (target.kind != want) corrupt(fmt::format("{} to a {}", op_name(), kind_name(target.kind)));
      if (m.device >= 0) {
        stream_batch(m);
        return;
      }
      append_to(target, stack_.data() + m.pos, stack_.size() - m.pos);
      stack_.resize(m.pos);
      return;
    }
    case 's': {  // SETITEM
      if (stack_.size() < floor() + 3) corrupt("SETITEM needs a dict, a key and a value");
      const Value& dict = stack_[stack_.size() - 3];
      if (dict.kind != Kind::Dict) corrupt(fmt::format("SETITEM on a {}", kind_name(dict.kind)));
      append_to(dict, stack_.data() + stack_.size() - 2, 2);
      stack_.resize(stack_.size() - 2);
      return;
    }
    case 'u': {  // SETITEMS
      const MarkInfo m = pop_mark();
      if (m.pos == 0) corrupt("SETITEMS with no dict below the MARK");
      const Value dict = stack_[m.pos - 1];
      if (dict.kind != Kind::Dict) corrupt(fmt::format("SETITEMS on a {}", kind_name(dict.kind)));
      if ((stack_.size() - m.pos) % 2 != 0) corrupt("SETITEMS with an odd number of items");
      append_to(dict, stack_.data() + m.pos, stack_.size() - m.pos);
      stack_.resize(m.pos);
      return;
    }
    case 'c': case 0x93: case 'R': case 'b': case 'i': case 'o': case 0x81: case 0x92:
    case 'P': case 'Q': case 0x82: case 0x83: case 0x84: case 0x97: case 0x98:
      throw InputError(fmt::format("refusing pickle opcode {} at byte {}: it would import, construct or call Python "
                                   "objects, which a memory snapshot never does",
                                   op_name(), op_pos_),
                       kNotSnapshotRemedy);
    default: {
      const char* name = pickle_opcode_name(op_);
      if (name) {
        throw InputError(fmt::format("unsupported pickle opcode {} at byte {} (a text-protocol opcode that "
                                     "PyTorch snapshots never contain)",
                                     name, op_pos_),
                         kNotSnapshotRemedy);
      }
      corrupt(fmt::format("unknown opcode byte 0x{:02x}", op_));
    }
  }
}

}  // namespace pickle_vm

const char* pickle_opcode_name(std::uint8_t op) {
  for (const auto& entry : kOpNames) {
    if (entry.op == op) return entry.name;
  }
  return nullptr;
}

PickleInfo read_pickle(std::span<const std::uint8_t> bytes, Document& doc, TraceEntrySink* sink, bool drop_pages) {
  pickle_vm::PickleVm vm(bytes, doc, sink, drop_pages);
  return vm.run();
}

}  // namespace memsnap
