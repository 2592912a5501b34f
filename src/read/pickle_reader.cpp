// The pickle VM: a stack, a memo and marks over the value arena. Only data opcodes are executed;
// every opcode that would import, construct or call anything is refused with its byte offset.
// device_traces lists are streamed to a TraceEntrySink batch by batch (see pickle_reader.h).
#include "read/pickle_reader.h"

#include <cstring>
#include <fmt/format.h>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#include "base/error.h"
#include "base/limits.h"

namespace memsnap {
namespace {

constexpr std::size_t kDropStep = std::size_t(16) << 20;  // release consumed file pages this often

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

struct MarkInfo {
  std::size_t pos;          // stack index where the marked items begin
  int device = -1;          // >= 0: the marked items are entries of device_traces[device]
  Document::Mark arena{};   // arena size when the mark was pushed (streaming only)
  std::size_t memo = 0;     // memo size when the mark was pushed (streaming only)
  bool dirty = false;       // something older than the mark was modified: do not release
};

// The pickle memo, compact: each slot is a 4-byte index into a value table. Released slots
// share one entry, and short strings with equal bytes share one (a snapshot writes a fresh
// "N/A" per trace entry), so millions of slots cost little more than their indices.
class Memo {
 public:
  Memo() { values_.push_back(Value::released()); }
  std::size_t size() const { return slots_.size(); }
  const Value& operator[](std::size_t i) const { return values_[slots_[i]]; }
  void push_back(const Value& v) { slots_.push_back(store(v)); }
  void set(std::size_t i, const Value& v) { slots_[i] = store(v); }
  void resize(std::size_t n) { slots_.resize(n, 0); }

 private:
  std::uint32_t store(const Value& v) {
    if (v.kind == Kind::Released) return 0;
    if (v.kind == Kind::Str && v.aux <= 32) {
      std::uint64_t h = 0xcbf29ce484222325ull;
      for (std::uint32_t k = 0; k < v.aux; ++k) h = (h ^ static_cast<std::uint8_t>(v.s[k])) * 0x100000001b3ull;
      std::uint32_t& cached = short_strings_[h & 255];
      if (cached && values_[cached].aux == v.aux && std::memcmp(values_[cached].s, v.s, v.aux) == 0) return cached;
      cached = append(v);
      return cached;
    }
    return append(v);
  }
  std::uint32_t append(const Value& v) {
    if (values_.size() >= limits::kMaxMemoEntries || values_.size() * sizeof(Value) > limits::memory_budget_bytes()) {
      throw InputError("the pickle memo exceeds memsnap's limit", kRecaptureRemedy);
    }
    values_.push_back(v);
    return static_cast<std::uint32_t>(values_.size() - 1);
  }
  std::vector<std::uint32_t> slots_;
  std::vector<Value> values_;
  std::uint32_t short_strings_[256] = {};
};

class PickleVm {
 public:
  PickleVm(std::span<const std::uint8_t> bytes, Document& doc, TraceEntrySink* sink, bool drop_pages)
      : data_(bytes.data()), size_(bytes.size()), doc_(doc), sink_(sink), drop_pages_(drop_pages) {
    stack_.reserve(4096);
  }

  PickleInfo run();

 private:
  // ---- input ----
  [[noreturn]] void truncated() const {
    throw InputError(fmt::format("the pickle ends unexpectedly at byte {} of {} (the file is truncated or corrupt)",
                                 size_, size_),
                     kRecaptureRemedy);
  }
  [[noreturn]] void corrupt(const std::string& what) const {
    throw InputError(fmt::format("malformed pickle at byte {}: {}", op_pos_, what), kRecaptureRemedy);
  }
  void need(std::size_t n) const {
    if (size_ - pos_ < n) truncated();
  }
  std::uint64_t read_le(std::size_t n) {
    need(n);
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < n; ++k) v |= std::uint64_t(data_[pos_ + k]) << (8 * k);
    pos_ += n;
    return v;
  }
  const char* take(std::uint64_t n) {
    if (n > limits::kMaxStringBytes) {
      corrupt(fmt::format("a string or bytes object of {} bytes exceeds memsnap's limit of {} bytes", n,
                          limits::kMaxStringBytes));
    }
    need(n);
    const char* p = reinterpret_cast<const char*>(data_ + pos_);
    pos_ += n;
    return p;
  }

  // ---- stack ----
  void push(const Value& v) {
    if (stack_.size() >= limits::kMaxStackValues) corrupt("the value stack exceeds memsnap's limit");
    stack_.push_back(v);
  }
  Value pop() {
    if (stack_.size() <= floor()) corrupt(fmt::format("{} needs a value but the stack is empty", op_name()));
    Value v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value& top() {
    if (stack_.size() <= floor()) corrupt(fmt::format("{} needs a value but the stack is empty", op_name()));
    return stack_.back();
  }
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back().pos; }
  MarkInfo pop_mark() {
    if (marks_.empty()) corrupt(fmt::format("{} without a MARK", op_name()));
    MarkInfo m = marks_.back();
    marks_.pop_back();
    return m;
  }
  const char* op_name() const {
    const char* n = pickle_opcode_name(op_);
    return n ? n : "opcode";
  }

  // ---- memo ----
  void memo_put(std::uint64_t index, const Value& v) {
    if (index >= limits::kMaxMemoEntries || index > memo_.size() + limits::kMaxMemoIndexGap) {
      corrupt(fmt::format("memo index {} is beyond memsnap's limit", index));
    }
    if (index == memo_.size()) {
      memo_.push_back(v);
      return;
    }
    if (index > memo_.size()) memo_.resize(index + 1);
    else if (!marks_.empty() && marks_.back().device >= 0 && index < marks_.back().memo) marks_.back().dirty = true;
    memo_.set(index, v);
  }
  void memo_get(std::uint64_t index) {
    if (index >= memo_.size() || memo_[index].kind == Kind::Released) {
      if (index < memo_.size() && released_any_) {
        corrupt(fmt::format("memo entry {} refers to a trace entry object that was shared in an unexpected way", index));
      }
      corrupt(fmt::format("memo entry {} is read before it was written", index));
    }
    push(memo_[index]);
  }

  // ---- containers ----
  void append_to(const Value& container, const Value* items, std::size_t count);
  Value make_from(Kind kind, std::size_t from);
  int trace_device_of(std::size_t p) const;
  bool is_root_value(std::size_t p, std::string_view key) const;
  std::size_t innermost_mark_at_or_below(std::size_t p, bool& found) const;
  void stream_batch(const MarkInfo& mark);
  bool fast_path_open();
  // kFrames: FRAME opcodes may appear (checked before every opcode); otherwise the entry is
  // decoded inside one frame (or a frameless protocol 2/3 file) where none can.
  template <bool kFrames>
  void skip_frames(std::size_t& p) {
    if constexpr (kFrames) {
      if (p < size_ && data_[p] == 0x95) [[unlikely]] skip_frames_slow(p);
    }
  }
  void skip_frames_slow(std::size_t& p);  // also notes where the frame ends
  bool try_fast_entry();
  template <bool kFrames>
  bool fast_entry();
  template <bool kFrames>
  bool fast_key(std::size_t& p, Value& key);
  template <bool kFrames>
  bool fast_scalar_or_value(std::size_t& p, Value& out);
  template <bool kFrames>
  bool fast_value(std::size_t& p, Value& out, bool allow_tuple = true);
  template <bool kFrames>
  bool fast_memo(std::size_t& p, const Value& v);
  template <bool kFrames>
  bool fast_memo_get(std::size_t& p, Value& out);
  template <bool kFrames>
  bool fast_frames(std::size_t& p, Value& out);
  void push_long(const std::uint8_t* bytes, std::size_t n);
  void dispatch();

  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::size_t op_pos_ = 0;
  std::uint8_t op_ = 0;
  Document& doc_;
  TraceEntrySink* sink_;
  std::vector<Value> stack_;
  std::vector<MarkInfo> marks_;
  Memo memo_;
  std::vector<Value> fast_pairs_;
  std::vector<Value> fast_frames_;
  std::size_t frame_end_ = 0;   // end of the current pickle frame (no FRAME opcode before it)
  std::size_t fast_limit_ = 0;  // the fast path reads no byte at or past this
  PickleInfo info_;
  bool stopped_ = false;
  bool released_any_ = false;
  bool drop_pages_ = false;
  std::size_t dropped_upto_ = 0;
  void drop_consumed_pages();
};

// A file-backed mapping's pages behind the cursor are handed back to the kernel every 16 MiB so
// resident memory does not grow with the file; strings still pointing there are re-read from
// the page cache if touched again.
void PickleVm::drop_consumed_pages() {
  constexpr std::size_t kStep = kDropStep;
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t keep_from = (pos_ - kStep / 2) / page * page;
  if (keep_from > dropped_upto_) {
    madvise(const_cast<std::uint8_t*>(data_) + dropped_upto_, keep_from - dropped_upto_, MADV_DONTNEED);
    dropped_upto_ = keep_from;
  }
}

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

// ---- fast path for trace entries ----
// Inside a streamed device_traces batch, a trace entry dict of PyTorch's shape (scalar values,
// strings, memo references, a (pool) 2-tuple, a frames list of memo references) is decoded
// straight from the bytes into key/value pairs for the sink, without building the dict. Any
// other shape makes it give up before changing anything, and the entry (and the rest of its
// batch, to keep file order) takes the generic path.

// Entries of the batch that took the generic path are handed over first, so the sink sees the
// batch in file order.
bool PickleVm::fast_path_open() {
  if (!sink_ || marks_.empty()) return false;
  const MarkInfo& m = marks_.back();
  if (m.device < 0 || m.dirty) return false;
  for (std::size_t k = m.pos; k < stack_.size(); ++k) sink_->trace_entry(static_cast<std::size_t>(m.device), stack_[k], doc_);
  info_.streamed_entries += stack_.size() - m.pos;
  stack_.resize(m.pos);
  return true;
}

// FRAME opcodes may sit between any two opcodes; they carry no data.
void PickleVm::skip_frames_slow(std::size_t& p) {
  while (p < size_ && data_[p] == 0x95 && size_ - p >= 9) {
    std::uint64_t length = 0;
    for (int k = 0; k < 8; ++k) length |= std::uint64_t(data_[p + 1 + k]) << (8 * k);
    p += 9;
    frame_end_ = length > size_ - p ? size_ : p + static_cast<std::size_t>(length);
  }
}

template <bool kFrames>
bool PickleVm::fast_memo(std::size_t& p, const Value& v) {
  skip_frames<kFrames>(p);
  if (p >= fast_limit_) return false;
  std::uint64_t index;
  if (data_[p] == 0x94) {
    index = memo_.size();
    p += 1;
  } else if (data_[p] == 'q' && p + 1 < fast_limit_) {
    index = data_[p + 1];
    p += 2;
  } else if (data_[p] == 'r' && p + 4 < fast_limit_) {
    index = std::uint64_t(data_[p + 1]) | std::uint64_t(data_[p + 2]) << 8 | std::uint64_t(data_[p + 3]) << 16 |
            std::uint64_t(data_[p + 4]) << 24;
    p += 5;
  } else {
    return true;  // not memoized
  }
  if (index != memo_.size() || memo_.size() >= limits::kMaxMemoEntries) return false;
  memo_.push_back(v);
  return true;
}

template <bool kFrames>
bool PickleVm::fast_memo_get(std::size_t& p, Value& out) {
  skip_frames<kFrames>(p);
  if (p >= fast_limit_) return false;
  std::uint64_t index;
  if (data_[p] == 'h' && p + 1 < fast_limit_) {
    index = data_[p + 1];
    p += 2;
  } else if (data_[p] == 'j' && p + 4 < fast_limit_) {
    index = std::uint64_t(data_[p + 1]) | std::uint64_t(data_[p + 2]) << 8 | std::uint64_t(data_[p + 3]) << 16 |
            std::uint64_t(data_[p + 4]) << 24;
    p += 5;
  } else {
    return false;
  }
  if (index >= memo_.size() || memo_[index].kind == Kind::Released) return false;
  out = memo_[index];
  return true;
}

template <bool kFrames>
bool PickleVm::fast_frames(std::size_t& p, Value& out) {
  // EMPTY_LIST [memo] then MARK refs APPENDS | ref APPEND | nothing.
  const std::size_t memo_at = p;
  std::size_t q = p;
  Value placeholder = Value::released();
  if (!fast_memo<kFrames>(q, placeholder)) return false;
  const bool memoized = q != memo_at;
  fast_frames_.clear();
  skip_frames<kFrames>(q);
  if (q < fast_limit_ && data_[q] == '(') {
    ++q;
    skip_frames<kFrames>(q);
    while (q < fast_limit_ && data_[q] != 'e') {
      Value ref;
      if (!fast_memo_get<kFrames>(q, ref)) return false;
      fast_frames_.push_back(ref);
      skip_frames<kFrames>(q);
    }
    if (q >= fast_limit_) return false;
    ++q;
  } else if (q < fast_limit_ && (data_[q] == 'h' || data_[q] == 'j')) {
    Value ref;
    std::size_t r = q;
    if (!fast_memo_get<kFrames>(r, ref)) return false;
    skip_frames<kFrames>(r);
    if (r >= fast_limit_ || data_[r] != 'a') return false;
    fast_frames_.push_back(ref);
    q = r + 1;
  }
  for (const Value& f : fast_frames_) {
    if (f.kind != Kind::Dict && f.kind != Kind::Interned) return false;
  }
  out = sink_->intern_stack(fast_frames_.data(), fast_frames_.size(), doc_);
  if (memoized) memo_.set(memo_.size() - 1, out);
  p = q;
  return true;
}

template <bool kFrames>
bool PickleVm::fast_value(std::size_t& p, Value& out, bool allow_tuple) {
  skip_frames<kFrames>(p);
  if (p >= fast_limit_) return false;
  const std::uint8_t op = data_[p];
  switch (op) {
    case 'K':
      if (p + 1 >= fast_limit_) return false;
      out = Value::integer(data_[p + 1]);
      p += 2;
      break;
    case 'M':
      if (p + 2 >= fast_limit_) return false;
      out = Value::integer(data_[p + 1] | data_[p + 2] << 8);
      p += 3;
      break;
    case 'J': {
      if (p + 4 >= fast_limit_) return false;
      const std::uint32_t u = std::uint32_t(data_[p + 1]) | std::uint32_t(data_[p + 2]) << 8 |
                              std::uint32_t(data_[p + 3]) << 16 | std::uint32_t(data_[p + 4]) << 24;
      out = Value::integer(static_cast<std::int32_t>(u));
      p += 5;
      break;
    }
    case 0x8a: {
      if (p + 1 >= fast_limit_) return false;
      const std::size_t n = data_[p + 1];
      if (n > 8 || p + 2 + n > fast_limit_) return false;
      const std::uint8_t* b = data_ + p + 2;
      std::uint64_t v = 0;
      for (std::size_t k = 0; k < n; ++k) v |= std::uint64_t(b[k]) << (8 * k);
      if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~std::uint64_t(0) << (8 * n);
      out = Value::integer(static_cast<std::int64_t>(v));
      p += 2 + n;
      break;
    }
    case 0x88: out = Value::boolean(true); p += 1; break;
    case 0x89: out = Value::boolean(false); p += 1; break;
    case 'N': out = Value::none(); p += 1; break;
    case 0x8c: {
      if (p + 1 >= fast_limit_) return false;
      const std::size_t n = data_[p + 1];
      if (p + 2 + n > fast_limit_) return false;
      out = Value::string(reinterpret_cast<const char*>(data_ + p + 2), static_cast<std::uint32_t>(n));
      p += 2 + n;
      return fast_memo<kFrames>(p, out);
    }
    case 'h': case 'j': return fast_memo_get<kFrames>(p, out);
    case ']': ++p; return fast_frames<kFrames>(p, out);
    default: return false;
  }
  // A scalar may start a pool-id 2-tuple: scalar scalar TUPLE2 [memo].
  if (allow_tuple && p + 1 < fast_limit_) {
    std::size_t q = p;
    skip_frames<kFrames>(q);
    Value second;
    const std::uint8_t next = q < fast_limit_ ? data_[q] : 0;
    if ((next == 'K' || next == 'M' || next == 'J' || next == 0x8a) && fast_value<kFrames>(q, second, false) && q < fast_limit_ &&
        (skip_frames<kFrames>(q), q < fast_limit_ && data_[q] == 0x86)) {
      const Value pair[2] = {out, second};
      Value tuple = doc_.new_container(Kind::Tuple);
      doc_.append(tuple, pair, 2);
      out = tuple;
      p = q + 1;
      return fast_memo<kFrames>(p, out);
    }
  }
  return true;
}

// A key: nearly always a memo reference to a str PyTorch wrote once.
template <bool kFrames>
bool PickleVm::fast_key(std::size_t& p, Value& key) {
  skip_frames<kFrames>(p);
  if (p >= fast_limit_) return false;
  const std::uint8_t* d = data_ + p;
  std::uint64_t index;
  if (d[0] == 'h' && p + 2 <= fast_limit_) {
    index = d[1];
    p += 2;
  } else if (d[0] == 'j' && p + 5 <= fast_limit_) {
    std::uint32_t u;
    std::memcpy(&u, d + 1, 4);
    index = u;
    p += 5;
  } else {
    return fast_value<kFrames>(p, key) && key.kind == Kind::Str;
  }
  if (index >= memo_.size()) return false;
  key = memo_[index];
  return key.kind == Kind::Str;
}

// A value: the common scalars and memo references inline, everything else (strings, the
// pool-id tuple, a frames list) through fast_value.
template <bool kFrames>
bool PickleVm::fast_scalar_or_value(std::size_t& p, Value& out) {
  skip_frames<kFrames>(p);
  const std::size_t start = p;
  const std::uint8_t* d = data_ + p;
  if (p + 10 <= fast_limit_) {
    switch (d[0]) {
      case 'K': out = Value::integer(d[1]); p += 2; break;
      case 'J': {
        std::int32_t v;
        std::memcpy(&v, d + 1, 4);
        out = Value::integer(v);
        p += 5;
        break;
      }
      case 0x8a: {
        const std::size_t n = d[1];
        if (n == 0 || n > 8) return fast_value<kFrames>(p, out);
        std::uint64_t v;
        std::memcpy(&v, d + 2, 8);
        if (n < 8) {
          v &= (std::uint64_t(1) << (8 * n)) - 1;
          if (d[1 + n] & 0x80) v |= ~std::uint64_t(0) << (8 * n);
        }
        out = Value::integer(static_cast<std::int64_t>(v));
        p += 2 + n;
        break;
      }
      case 'h': case 'j': return fast_memo_get<kFrames>(p, out);
      default: return fast_value<kFrames>(p, out);
    }
    // A scalar followed by another scalar starts a 2-tuple: let fast_value take it.
    if (p >= fast_limit_) return true;
    const std::uint8_t next = data_[p];
    if (next == 'K' || next == 'M' || next == 'J' || next == 0x8a || next == 0x95) {
      p = start;
      return fast_value<kFrames>(p, out);
    }
    return true;
  }
  return fast_value<kFrames>(p, out);
}

template <bool kFrames>
bool PickleVm::fast_entry() {
  const std::size_t memo_before = memo_.size();
  std::size_t p = pos_;
  fast_pairs_.clear();
  bool ok = fast_memo<kFrames>(p, Value::released());
  skip_frames<kFrames>(p);
  ok = ok && p < fast_limit_ && data_[p] == '(';
  if (ok) {
    ++p;
    skip_frames<kFrames>(p);
    while (ok && p < fast_limit_ && data_[p] != 'u') {
      Value key, value;
      ok = fast_key<kFrames>(p, key) && fast_scalar_or_value<kFrames>(p, value) && fast_pairs_.size() < 64;
      if (ok) {
        fast_pairs_.push_back(key);
        fast_pairs_.push_back(value);
      }
      skip_frames<kFrames>(p);
    }
    ok = ok && p < fast_limit_;
    if (ok) ++p;  // SETITEMS
    // The finished dict must not be used by what follows (it is never on the stack).
    std::size_t q = p;
    skip_frames<kFrames>(q);
    ok = ok && q < fast_limit_ && (data_[q] == '}' || data_[q] == 'e');
  }
  if (!ok) {
    memo_.resize(memo_before);
    return false;  // the generic path takes over, for the rest of this batch too
  }
  released_any_ = true;
  pos_ = p;
  sink_->trace_entry_fields(static_cast<std::size_t>(marks_.back().device), fast_pairs_.data(), fast_pairs_.size(), doc_);
  ++info_.streamed_entries;
  return true;
}

// Decodes the entry inside the current frame without FRAME checks when it can (nearly always),
// else with them.
bool PickleVm::try_fast_entry() {
  const bool frameless = info_.protocol < 4 || pos_ < frame_end_;
  if (frameless) {
    fast_limit_ = info_.protocol < 4 ? size_ : frame_end_;
    if (fast_entry<false>()) return true;
  }
  fast_limit_ = size_;
  return fast_entry<true>();
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
  std::size_t next_drop = kDropStep;
  while (!stopped_) {
    if (pos_ >= size_) truncated();
    if (drop_pages_ && pos_ >= next_drop) {
      drop_consumed_pages();
      next_drop = pos_ + kDropStep;
    }
    op_pos_ = pos_;
    op_ = data_[pos_++];
    dispatch();
  }
  if (stack_.empty()) corrupt("STOP with an empty stack");
  doc_.root = stack_.back();
  info_.stop_offset = op_pos_;
  info_.trailing_bytes = size_ - pos_;
  info_.memo_entries = memo_.size();
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
      if (fast_path_open() && try_fast_entry()) return;
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
    case 0x94: memo_put(memo_.size(), top()); return;  // MEMOIZE
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

}  // namespace

const char* pickle_opcode_name(std::uint8_t op) {
  for (const auto& entry : kOpNames) {
    if (entry.op == op) return entry.name;
  }
  return nullptr;
}

PickleInfo read_pickle(std::span<const std::uint8_t> bytes, Document& doc, TraceEntrySink* sink, bool drop_pages) {
  PickleVm vm(bytes, doc, sink, drop_pages);
  return vm.run();
}

}  // namespace memsnap
