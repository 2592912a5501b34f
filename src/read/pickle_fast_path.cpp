// The reader's fast path for trace entries (see the comment below and pickle_vm.h).
#include "read/pickle_vm.h"

namespace memsnap::pickle_vm {

namespace {

// BININT1, BININT2, BININT or LONG1 of at most 8 bytes at d (10 readable bytes); false otherwise.
[[gnu::always_inline]] inline bool read_small_int(const std::uint8_t* d, std::size_t& p, std::int64_t& out) {
  switch (d[0]) {
    case op::kBinInt1: out = d[1]; p += 2; return true;
    case op::kBinInt2: out = d[1] | d[2] << 8; p += 3; return true;
    case op::kBinInt: {
      std::int32_t v;
      std::memcpy(&v, d + 1, 4);
      out = v;
      p += 5;
      return true;
    }
    case op::kLong1: {
      const std::size_t n = d[1];
      if (n - 1 > 7) {  // n == 0 (zero) or n > 8 (not a small int: p stays)
        if (n != 0) return false;
        out = 0;
        p += 2;
        return true;
      }
      // The n little-endian bytes, sign-extended from the top one: shifted to the word's top and back.
      std::uint64_t v;
      std::memcpy(&v, d + 2, 8);
      const unsigned unused = 64 - 8 * static_cast<unsigned>(n);
      out = static_cast<std::int64_t>(v << unused) >> unused;
      p += 2 + n;
      return true;
    }
    default: return false;
  }
}

// A memo opcode at d with `available` readable bytes: `one_byte` i or `four_byte` iiii (BINGET /
// LONG_BINGET, BINPUT / LONG_BINPUT). Its length with the index in `index`;
// 0 for another opcode or when its bytes are not all readable.
inline std::size_t memo_index(const std::uint8_t* d, std::size_t available, std::uint8_t one_byte, std::uint8_t four_byte,
                              std::uint64_t& index) {
  if (available >= 2 && d[0] == one_byte) {
    index = d[1];
    return 2;
  }
  if (available >= 5 && d[0] == four_byte) {
    std::uint32_t u;
    std::memcpy(&u, d + 1, 4);
    index = u;
    return 5;
  }
  return 0;
}

// BINGET or LONG_BINGET at d (see memo_index).
inline std::size_t memo_ref(const std::uint8_t* d, std::size_t available, std::uint64_t& index) {
  return memo_index(d, available, op::kBinGet, op::kLongBinGet, index);
}

}  // namespace

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
  if (m.device < 0 || m.dirty || memo_.has_sparse()) return false;  // the fast paths push at size()
  for (std::size_t k = m.pos; k < stack_.size(); ++k) sink_->trace_entry(static_cast<std::size_t>(m.device), stack_[k], doc_);
  info_.streamed_entries += stack_.size() - m.pos;
  stack_.resize(m.pos);
  return true;
}

// FRAME opcodes may sit between any two opcodes; they carry no data.
void PickleVm::skip_frames_slow(std::size_t& p) {
  while (p < size_ && data_[p] == op::kFrame && size_ - p >= 9) {
    std::uint64_t length = 0;
    for (int k = 0; k < 8; ++k) length |= std::uint64_t(data_[p + 1 + k]) << (8 * k);
    p += 9;
    frame_end_ = length > size_ - p ? size_ : p + static_cast<std::size_t>(length);
  }
}

// A memo put at p of the value being built, which must name the next slot (MEMOIZE, or BINPUT /
// LONG_BINPUT of memo_.size()): p goes past it and `memoized` says whether there was one. False
// for a put anywhere else, which the fast paths leave to the generic one.
template <bool kFrames>
bool PickleVm::fast_memo_next(std::size_t& p, bool& memoized) {
  skip_frames<kFrames>(p);
  memoized = false;
  if (p >= fast_limit_) return false;
  std::uint64_t index;
  if (data_[p] == op::kMemoize) {
    index = memo_.size();
    p += 1;
  } else if (const std::size_t length = memo_index(data_ + p, fast_limit_ - p, op::kBinPut, op::kLongBinPut, index)) {
    p += length;
  } else {
    return true;  // not memoized
  }
  memoized = true;
  return index == memo_.size() && memo_.size() < limits::kMaxMemoEntries;
}

template <bool kFrames>
bool PickleVm::fast_memo(std::size_t& p, const Value& v) {
  bool memoized;
  if (!fast_memo_next<kFrames>(p, memoized)) return false;
  if (memoized) memo_.push_back(v);
  return true;
}

template <bool kFrames>
bool PickleVm::fast_memo_get(std::size_t& p, Value& out) {
  skip_frames<kFrames>(p);
  if (p >= fast_limit_) return false;
  std::uint64_t index;
  const std::size_t length = memo_ref(data_ + p, fast_limit_ - p, index);
  if (length == 0) return false;
  p += length;
  if (index >= memo_.size() || memo_[index].kind == Kind::Released) return false;
  out = memo_[index];
  return true;
}

// One memo reference in a frames list, appended as a frame id: from the memo's per-slot cache,
// else resolved by the sink once and cached.
template <bool kFrames>
[[gnu::always_inline]] inline bool PickleVm::fast_frame_id(std::size_t& p) {
  std::uint64_t index;
  const std::size_t length = memo_ref(data_ + p, fast_limit_ - p, index);
  if (length == 0) return false;
  std::uint32_t id;
  if (!memo_.cached_frame(index, id)) {
    if (index >= memo_.size()) return false;
    const Value& v = memo_[index];
    if (v.kind != Kind::Dict && v.kind != Kind::Interned) return false;
    // The trace split's thread names a slot it cannot see by the slot (split_trace.h).
    id = is_split_slot(v) ? SplitTrace::kSlot | static_cast<std::uint32_t>(index) : sink_->frame_id(v, doc_);
    memo_.cache_frame(index, id);
  }
  fast_frame_ids_.push_back(id);
  p += length;
  return true;
}

// The references of a frames list up to its APPENDS, inside one pickle frame (no FRAME opcode
// can occur): the tight loop of the read, 44-76 references per list on files with C++ frames.
// The memo's frame-id cache and the output buffer are held in locals (reloaded only after a
// frame dict seen for the first time), so a reference costs a dozen instructions.
bool PickleVm::frame_ids_in_frame(std::size_t& p) {
  const std::uint8_t* d = data_ + p;
  const std::uint8_t* const end = data_ + fast_limit_;
  const std::uint32_t* cache = memo_.frame_cache();
  std::size_t cached = memo_.frame_cache_size();
  std::uint32_t* out = fast_frame_ids_.next();
  std::uint32_t* room_end = fast_frame_ids_.room_end();
  // Below `safe` a LONG_BINGET's five bytes are readable (d > data_: PROTO comes first).
  const std::uint8_t* const safe = end - d >= 5 ? end - 5 : d - 1;
  for (;;) {
    const std::uint8_t* const at = d;
    std::uint32_t index;
    if (d <= safe && *d == op::kLongBinGet) {
      std::memcpy(&index, d + 1, 4);
      d += 5;
    } else if (d < end && *d == op::kBinGet && end - d >= 2) {
      index = d[1];
      d += 2;
    } else {
      break;
    }
    const std::uint32_t entry = index < cached ? cache[index] : 0;
    if (entry == 0) [[unlikely]] {  // a frame dict not seen before: the sink resolves it
      fast_frame_ids_.commit(out);
      std::size_t next = static_cast<std::size_t>(at - data_);
      if (!fast_frame_id<false>(next)) return false;
      d = data_ + next;
      cache = memo_.frame_cache();
      cached = memo_.frame_cache_size();
      out = fast_frame_ids_.next();
      room_end = fast_frame_ids_.room_end();
      continue;
    }
    if (out == room_end) [[unlikely]] {
      fast_frame_ids_.commit(out);
      fast_frame_ids_.grow();
      out = fast_frame_ids_.next();
      room_end = fast_frame_ids_.room_end();
    }
    *out++ = entry - 1;
  }
  fast_frame_ids_.commit(out);
  if (d >= end || *d != op::kAppends) return false;
  p = static_cast<std::size_t>(d - data_);
  return true;
}

// The frames list whose references start at p, from FramesListCache when an equal list was
// decoded before with the memo's frames as they are; p then points past its APPENDS. Otherwise
// nullptr, and `hash` is that of the references up to the APPENDS (to remember the list by).
CachedStack* PickleVm::cached_frames_list(std::size_t& p, std::uint64_t& hash) {
  frames_lists_.keep_for(memo_.frame_epoch());
  const std::uint8_t* body = data_ + p;
  const std::uint8_t* limit = data_ + fast_limit_;
  std::size_t length = 0;
  CachedStack* cached = frames_lists_.find_next(body, limit, length);
  if (!cached) cached = frames_lists_.find_short(body, limit, length);
  if (!cached) {
    const ReferenceRun run = memo_reference_run(body, limit);
    if (run.end == limit || *run.end != op::kAppends) return nullptr;
    length = static_cast<std::size_t>(run.end - body);
    hash = run.hash;
    cached = frames_lists_.find(body, length, hash, limit);
    if (!cached) return nullptr;
  }
  p += length + 1;
  return cached;
}

// The memo slot of a frames list found in FramesListCache: one naming the entry that held its
// stack the first time, or, the first time, the stack itself (that entry then kept with it).
[[gnu::always_inline]] inline void PickleVm::memoize_cached_stack(CachedStack& cached) {
  if (cached.memo_entry != 0) return memo_.push_interned(cached.memo_entry);
  memo_.push_back(cached.stack);
  cached.memo_entry = memo_.last_entry();
}

// A frames list: EMPTY_LIST [memo] then MARK refs APPENDS | ref APPEND | nothing, decoded in one
// loop into frame ids (no value per reference) and interned as a stack.
template <bool kFrames>
bool PickleVm::fast_frames(std::size_t& p, Value& out) {
  // The list's memo slot is pushed once its stack is known: a reference to the list from inside
  // itself names a slot not yet written, which the fast path refuses as it refused the
  // placeholder the slot held before.
  std::size_t q = p;
  bool memoized;
  if (!fast_memo_next<kFrames>(q, memoized)) return false;
  fast_frame_ids_.clear();
  skip_frames<kFrames>(q);
  std::size_t body = 0, body_end = 0;  // a list's references decoded inside a frame, to remember
  std::uint64_t body_hash = 0;
  if (q < fast_limit_ && data_[q] == op::kMark) {
    ++q;
    if constexpr (!kFrames) {
      if (CachedStack* cached = cached_frames_list(q, body_hash)) {
        out = cached->stack;
        if (memoized) memoize_cached_stack(*cached);
        p = q;
        return true;
      }
      body = q;
      if (!frame_ids_in_frame(q)) return false;
      body_end = q;
    } else {
      skip_frames<kFrames>(q);
      while (q < fast_limit_ && data_[q] != op::kAppends) {
        if (!fast_frame_id<kFrames>(q)) return false;
        skip_frames<kFrames>(q);
      }
    }
    if (q >= fast_limit_) return false;
    ++q;
  } else if (q < fast_limit_ && (data_[q] == op::kBinGet || data_[q] == op::kLongBinGet)) {
    std::size_t r = q;
    if (!fast_frame_id<kFrames>(r)) return false;
    skip_frames<kFrames>(r);
    if (r >= fast_limit_ || data_[r] != op::kAppend) return false;
    q = r + 1;
  }
  out = sink_->intern_frame_ids(fast_frame_ids_.data(), fast_frame_ids_.size());
  if (memoized) memo_.push_back(out);
  if (body_end != 0) {
    const std::size_t length = body_end - body;
    frames_lists_.insert(data_ + body, length, body_hash, {out, memoized ? memo_.last_entry() : 0}, data_ + fast_limit_);
  }
  p = q;
  return true;
}

// A list of memo references outside the trace fast path (a block's or a segment's frames list,
// nearly always): EMPTY_LIST [memo put] MARK (BINGET | LONG_BINGET)... APPENDS inside one pickle
// frame. The container, the memo put and the items are exactly the generic path's, in one step
// instead of one dispatch per reference; anything else (a bad reference, a FRAME, a trace list)
// leaves the rest to the generic path at the opcode it stopped before. Returns false when it
// did nothing (the caller then pushes the list itself).
bool PickleVm::try_reference_list() {
  const std::size_t limit = info_.protocol < 4 ? size_ : frame_end_;
  if (pos_ >= limit) return false;
  push(doc_.new_container(Kind::List));  // what EMPTY_LIST does
  if (sink_ && trace_device_of(stack_.size() - 1) >= 0) return true;  // device_traces[d]: streamed
  std::size_t p = pos_;
  std::uint64_t index;
  if (data_[p] == op::kMemoize) {
    memo_put(memo_.count(), top());
    pos_ = ++p;
  } else if (const std::size_t length = memo_index(data_ + p, limit - p, op::kBinPut, op::kLongBinPut, index)) {
    memo_put(index, top());
    pos_ = p += length;
  }
  if (p >= limit || data_[p] != op::kMark || marks_.size() >= limits::kMaxNestingDepth) return true;
  ++p;
  std::uint64_t bytes_hash = 0;
  std::size_t bytes_length = 0;  // 0: the list is not remembered by its bytes
  if (share_earlier_list(p, limit, bytes_hash, bytes_length)) return true;
  const std::size_t body = p;
  reference_values_.clear();
  while (p < limit && data_[p] != op::kAppends) {
    const std::size_t length = memo_ref(data_ + p, limit - p, index);
    const Value* v = length ? memo_.find(index) : nullptr;
    if (!v || v->kind == Kind::Released) return true;  // the generic path reports it
    reference_values_.push_back(*v);
    p += length;
  }
  if (p >= limit) return true;
  append_reference_list(top());
  if (bytes_length != 0) {
    reference_list_bytes_.insert(data_ + body, bytes_length, bytes_hash, {top().index, doc_.size(top())});
  }
  pos_ = p + 1;
  return true;
}

// The references from p to an APPENDS byte for byte equal to an earlier list's outside the
// trace, with no memo slot changed since: the new list on top takes the earlier list's items
// (Document::share_items), and the reader goes on past the APPENDS. Otherwise `hash` and
// `length` say how to remember the list once decoded (length 0: not to be remembered).
bool PickleVm::share_earlier_list(std::size_t p, std::size_t limit, std::uint64_t& hash, std::size_t& length) {
  if (streaming()) return false;  // its containers are released with the batch
  reference_list_bytes_.keep_for(memo_.slot_epoch());
  const std::uint8_t* body = data_ + p;
  const ReferenceRun run = memo_reference_run(body, data_ + limit);
  if (run.end == body || run.end == data_ + limit || *run.end != op::kAppends) return false;
  length = static_cast<std::size_t>(run.end - body);
  hash = run.hash;
  const EarlierList* earlier = reference_list_bytes_.find(body, length, hash);
  if (!earlier) return false;
  const Value list = Value::container(Kind::List, earlier->index);
  if (doc_.size(list) != earlier->size) return false;  // appended to since
  doc_.share_items(top(), list);
  pos_ = p + length + 1;
  return true;
}

bool PickleVm::streaming() const {
  for (const MarkInfo& m : marks_) {
    if (m.device >= 0) return true;
  }
  return false;
}

// The items of reference_values_ into the new, empty `list`: shared with an equal list read
// before, when there is one. Only outside streamed batches, whose containers are released (an
// entry of reference_lists_ would outlive its container).
void PickleVm::append_reference_list(const Value& list) {
  const Value* items = reference_values_.data();
  const std::size_t count = reference_values_.size();
  if (count == 0 || streaming()) return append_to(list, items, count);
  std::uint64_t h = count;
  for (std::size_t k = 0; k < count; ++k) {
    h = (h ^ (items[k].u + (std::uint64_t(items[k].aux) << 8) + static_cast<std::uint64_t>(items[k].kind))) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  const auto [it, inserted] = reference_lists_.try_emplace(h, list.index);
  if (!inserted) {
    const Value earlier = Value::container(Kind::List, it->second);
    if (doc_.holds(earlier, items, count)) return doc_.share_items(list, earlier);
  }
  append_to(list, items, count);
}

template <bool kFrames>
bool PickleVm::fast_value(std::size_t& p, Value& out, bool allow_tuple) {
  skip_frames<kFrames>(p);
  if (p >= fast_limit_) return false;
  const std::uint8_t op = data_[p];
  switch (op) {
    case op::kBinInt1:
      if (p + 1 >= fast_limit_) return false;
      out = Value::integer(data_[p + 1]);
      p += 2;
      break;
    case op::kBinInt2:
      if (p + 2 >= fast_limit_) return false;
      out = Value::integer(data_[p + 1] | data_[p + 2] << 8);
      p += 3;
      break;
    case op::kBinInt: {
      if (p + 4 >= fast_limit_) return false;
      const std::uint32_t u = std::uint32_t(data_[p + 1]) | std::uint32_t(data_[p + 2]) << 8 |
                              std::uint32_t(data_[p + 3]) << 16 | std::uint32_t(data_[p + 4]) << 24;
      out = Value::integer(static_cast<std::int32_t>(u));
      p += 5;
      break;
    }
    case op::kLong1: {
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
    case op::kNewTrue: out = Value::boolean(true); p += 1; break;
    case op::kNewFalse: out = Value::boolean(false); p += 1; break;
    case op::kNone: out = Value::none(); p += 1; break;
    case op::kShortBinUnicode: {
      if (p + 1 >= fast_limit_) return false;
      const std::size_t n = data_[p + 1];
      if (p + 2 + n > fast_limit_) return false;
      out = Value::string(reinterpret_cast<const char*>(data_ + p + 2), static_cast<std::uint32_t>(n));
      p += 2 + n;
      return fast_memo<kFrames>(p, out);
    }
    case op::kBinGet: case op::kLongBinGet: return fast_memo_get<kFrames>(p, out);
    case op::kEmptyList: ++p; return fast_frames<kFrames>(p, out);
    default: return false;
  }
  // A scalar may start a pool-id 2-tuple: scalar scalar TUPLE2 [memo].
  if (allow_tuple && p + 1 < fast_limit_) {
    std::size_t q = p;
    skip_frames<kFrames>(q);
    Value second;
    const std::uint8_t next = q < fast_limit_ ? data_[q] : 0;
    if ((next == op::kBinInt1 || next == op::kBinInt2 || next == op::kBinInt || next == op::kLong1) && fast_value<kFrames>(q, second, false) && q < fast_limit_ &&
        (skip_frames<kFrames>(q), q < fast_limit_ && data_[q] == op::kTuple2)) {
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

// A key: a str, nearly always a memo reference to one PyTorch wrote once (fast_value takes
// memo references through fast_memo_get).
template <bool kFrames>
bool PickleVm::fast_key(std::size_t& p, Value& key) {
  return fast_value<kFrames>(p, key) && key.kind == Kind::Str;
}

// A value: the common scalars and memo references inline, everything else (strings, the
// pool-id tuple, a frames list) through fast_value.
template <bool kFrames>
bool PickleVm::fast_scalar_or_value(std::size_t& p, Value& out) {
  skip_frames<kFrames>(p);
  const std::size_t start = p;
  const std::uint8_t* d = data_ + p;
  if (p + 10 <= fast_limit_) {
    std::int64_t n;
    if (d[0] == op::kBinGet || d[0] == op::kLongBinGet) return fast_memo_get<kFrames>(p, out);
    if (!read_small_int(d, p, n)) return fast_value<kFrames>(p, out);
    out = Value::integer(n);
    // A scalar followed by another scalar starts a 2-tuple: let fast_value take it.
    if (p >= fast_limit_) return true;
    const std::uint8_t next = data_[p];
    if (next == op::kBinInt1 || next == op::kBinInt2 || next == op::kBinInt || next == op::kLong1 || next == op::kFrame) {
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
  std::size_t pairs = 0;
  bool ok = fast_memo<kFrames>(p, Value::released());
  skip_frames<kFrames>(p);
  ok = ok && p < fast_limit_ && data_[p] == op::kMark;
  if (ok) {
    ++p;
    skip_frames<kFrames>(p);
    while (ok && p < fast_limit_ && data_[p] != op::kSetItems) {
      Value key, value;
      ok = pairs + 2 <= kMaxFastPairs && fast_key<kFrames>(p, key) && fast_scalar_or_value<kFrames>(p, value);
      if (ok) {
        fast_pairs_[pairs++] = key;
        fast_pairs_[pairs++] = value;
      }
      skip_frames<kFrames>(p);
    }
    ok = ok && p < fast_limit_;
    if (ok) ++p;  // SETITEMS
    // The finished dict must not be used by what follows (it is never on the stack).
    std::size_t q = p;
    skip_frames<kFrames>(q);
    ok = ok && q < fast_limit_ && (data_[q] == op::kEmptyDict || data_[q] == op::kAppends);
  }
  if (!ok) {
    memo_.resize(memo_before);
    return false;  // the generic path takes over, for the rest of this batch too
  }
  released_any_ = true;
  pos_ = p;
  sink_->trace_entry_fields(static_cast<std::size_t>(marks_.back().device), fast_pairs_, pairs, doc_);
  ++info_.streamed_entries;
  return true;
}

// ---- typed fast path ----
// Nearly every entry has PyTorch's exact shape: memo-referenced keys in a fixed order, small
// ints, a memoized action str, a memo-referenced (or new) frames list. typed_entry decodes such
// an entry straight into TraceFields: keys are recognised by their opcode bytes at each position, ints are
// read in place, and nothing is built for the values memsnap ignores beyond what the memo needs.
// Anything else (an unknown key, a value of another type, a negative size) gives up before the
// sink sees anything, and fast_entry or the generic path reports it properly.

// What the str at memo slot `index` means as a trace-entry key (Unknown when it is not a str).
TraceField PickleVm::field_of_key(std::uint64_t index) {
  if (index >= memo_.size() || memo_[index].kind != Kind::Str) return TraceField::Unknown;
  return sink_->trace_field(memo_[index].str());
}


// A str, memo reference or anything else fast_value takes, for the action, frames and ignored
// fields. Memoized short strs (compile_context's "N/A") and memo references are the usual case.
template <bool kFrames>
[[gnu::always_inline]] inline bool PickleVm::typed_value(std::size_t& p, Value& v, bool allow_tuple) {
  const std::uint8_t* d = data_ + p;  // 10 readable bytes
  std::uint64_t index;
  if (const std::size_t length = memo_ref(d, fast_limit_ - p, index)) {
    if (index >= memo_.size()) return false;
    v = memo_[index];
    if (v.kind == Kind::Released) return false;
    if (is_split_slot(v)) [[unlikely]] v.u = index;  // the trace split's thread: which slot
    p += length;
    return true;
  }
  if (d[0] == op::kShortBinUnicode && p + 3 + d[1] <= fast_limit_ && d[2 + d[1]] == op::kMemoize) {
    const std::uint32_t n = d[1];
    if (memo_.size() >= limits::kMaxMemoEntries) return false;
    memo_.push_back(Value::string(reinterpret_cast<const char*>(d + 2), n));
    v = memo_[memo_.size() - 1];  // an equal str memoized before is shared (its bytes stay where first read)
    p += 3 + n;
    return true;
  }
  std::size_t q = p;  // a copy, so that p itself never has its address taken (stays in a register)
  const bool ok = fast_value<kFrames>(q, v, allow_tuple);
  p = q;
  return ok;
}

// typed_value for a frames value. The usual one, a new list (EMPTY_LIST MEMOIZE MARK refs
// APPENDS) equal to the one that followed the previous list the last time
// (FramesListCache::find_next) and memoized before, is taken inline: its stack, and a memo slot
// naming the entry that holds it. Anything else goes the full way (fast_frames).
template <bool kFrames>
[[gnu::always_inline]] inline bool PickleVm::typed_frames(std::size_t& p, Value& v) {
  if constexpr (!kFrames) {
    const std::uint8_t* d = data_ + p;  // 10 readable bytes
    if (d[0] == op::kEmptyList && d[1] == op::kMemoize && d[2] == op::kMark && memo_.size() < limits::kMaxMemoEntries) {
      frames_lists_.keep_for(memo_.frame_epoch());
      std::size_t length = 0;
      // Memoized before (the usual list): the first time goes the full way.
      CachedStack* cached = frames_lists_.find_next(d + 3, data_ + fast_limit_, length);
      if (cached && cached->memo_entry != 0) {
        v = cached->stack;
        memoize_cached_stack(*cached);
        p += 3 + length + 1;
        return true;
      }
    }
  }
  return typed_value<kFrames>(p, v, false);
}

// typed_value for the value after a key: a memoized short str equal to the one read last after
// this key (`known`) is one word compare and one memo slot; a new one is remembered.
template <bool kFrames>
[[gnu::always_inline]] inline bool PickleVm::keyed_value(std::size_t& p, KeyBytes& known, Value& v, bool allow_tuple) {
  const std::uint8_t* d = data_ + p;  // 10 readable bytes
  std::uint64_t word;
  std::memcpy(&word, d, 8);
  if ((word & known.str_mask) == known.str_bytes && memo_.size() < limits::kMaxMemoEntries) {
    memo_.push_short_str(known.str_entry);
    v = memo_.entry(known.str_entry);
    p += known.str_length;
    return true;
  }
  if (d[0] == op::kShortBinUnicode && d[1] <= 5 && d[2 + d[1]] == op::kMemoize && memo_.size() < limits::kMaxMemoEntries) {
    const std::uint32_t length = 3 + d[1];
    memo_.push_back(Value::string(reinterpret_cast<const char*>(d + 2), d[1]));
    const std::uint64_t mask = ~std::uint64_t(0) >> (64 - 8 * length);
    known.str_bytes = word & mask;
    known.str_mask = mask;
    known.str_length = length;
    known.str_entry = memo_.last_entry();
    v = memo_.entry(known.str_entry);  // an equal str memoized before is shared (its bytes stay where first read)
    p += length;
    return true;
  }
  return typed_value<kFrames>(p, v, allow_tuple);
}

// keyed_value for the action: a str (or, on a split thread, a slot it cannot see).
template <bool kFrames>
[[gnu::always_inline]] inline bool PickleVm::typed_action(std::size_t& p, KeyBytes& known, Value& action) {
  return keyed_value<kFrames>(p, known, action, false) && (action.kind == Kind::Str || is_split_slot(action));
}

// PyTorch writes every trace entry's first keys in one order: action, addr, size, stream and,
// where its version records it, time_us (so do all 54 real files of the corpus). Which positions
// hold them is learned with the keys' bytes.
void PickleVm::learn_prefix() {
  constexpr TraceField kOrder[5] = {TraceField::Action, TraceField::Addr, TraceField::Size, TraceField::Stream, TraceField::Time};
  unsigned n = 0;
  while (n < 5 && key_bytes_[n].field == kOrder[n]) ++n;
  typed_prefix_ = n >= 4 ? n : 0;
}

// Those first keys decoded in a straight line, inside one pickle frame: each position's key is
// compared with the one learned there and its value read as that field's, with no dispatch on
// the field. Returns the position the per-key loop goes on from (the first whose key is not the
// one learned there: the loop then learns it), or nullptr where the entry is not one the typed
// path takes (a value of another type).
template <bool kFrames>
[[gnu::always_inline]] inline PickleVm::KeyBytes* PickleVm::typed_prefix(std::size_t& p, TraceFields& f, std::int64_t* ints, bool* read) {
  KeyBytes* const keys = key_bytes_;
  // A key (at most 5 bytes) and its value (at most 10) at each of the five positions: one check
  // covers them all.
  constexpr std::size_t kRoom = 5 * 15;
  if (kFrames || typed_prefix_ == 0 || fast_limit_ < kRoom || p > fast_limit_ - kRoom) return keys;
  const std::uint8_t* const data = data_;
  auto key = [&](const KeyBytes& known) __attribute__((always_inline)) {
    std::uint64_t word;
    std::memcpy(&word, data + p, 8);
    if ((word & known.mask) != known.bytes) return false;
    p += known.length;
    return true;
  };
  auto integer = [&](TraceField field) __attribute__((always_inline)) {
    read[static_cast<unsigned>(field)] = true;
    return read_small_int(data + p, p, ints[static_cast<unsigned>(field)]);
  };
  if (!key(keys[0])) return keys;
  if (!typed_action<false>(p, keys[0], f.action)) return nullptr;
  if (!key(keys[1])) return keys + 1;
  if (!integer(TraceField::Addr)) return nullptr;
  if (!key(keys[2])) return keys + 2;
  if (!integer(TraceField::Size)) return nullptr;
  if (!key(keys[3])) return keys + 3;
  if (!integer(TraceField::Stream)) return nullptr;
  if (typed_prefix_ < 5 || !key(keys[4])) return keys + 4;
  if (!integer(TraceField::Time)) return nullptr;
  return keys + 5;
}

template <bool kFrames>
bool PickleVm::typed_entry_fields(std::size_t& p_io, TraceFields& f) {
  std::size_t p = p_io;
  const std::size_t limit = fast_limit_;
  const std::uint8_t* const data = data_;  // a local: the stores into f and the memo cannot move it
  // Every fixed-size opcode fits in 10 bytes, and a key (a memo reference) in 5: inside a frame
  // one check a position covers the key and its value (an entry that ends this close to the
  // frame's end is left to the key/value fast path, fast_entry). The last position one may start at:
  constexpr std::size_t kRoom = kFrames ? 10 : 15;
  if (limit < kRoom) return false;
  const std::size_t last_start = limit - kRoom;
  if (p < limit && data_[p] == op::kMemoize && memo_.size() < limits::kMaxMemoEntries) {
    memo_.push_released();  // the dict itself: PyTorch never refers to it again
    ++p;
  } else {
    std::size_t q = p;
    if (!fast_memo<kFrames>(q, Value::released())) return false;
    p = q;
  }
  skip_frames<kFrames>(p);
  if (p >= fast_limit_ || data_[p] != op::kMark) return false;
  ++p;
  const std::uint64_t generation = memo_.generation();
  if (generation != key_bytes_generation_) {
    for (KeyBytes& k : key_bytes_) k = KeyBytes{};
    key_bytes_generation_ = generation;
    typed_prefix_ = 0;
  }
  std::int64_t ints[5] = {};  // by TraceField: Addr, Size, Stream, Time
  bool read[8] = {};  // by TraceField: which of the ints were read (one store, no compare)
  // The keys learned at each position, walked by pointer (position k uses key_bytes_[k % kKeySlots])
  // from where typed_prefix stopped.
  KeyBytes* const first_key = key_bytes_;
  KeyBytes* const keys_end = key_bytes_ + kKeySlots;
  KeyBytes* const loop_start = typed_prefix<kFrames>(p, f, ints, read);
  if (!loop_start) return false;
  for (KeyBytes* next_key = loop_start;; next_key = next_key + 1 == keys_end ? first_key : next_key + 1) {
    skip_frames<kFrames>(p);
    if (p > last_start) return false;
    const std::uint8_t* d = data + p;
    std::uint64_t word;
    std::memcpy(&word, d, 8);
    KeyBytes& known = *next_key;
    TraceField field;
    if ((word & known.mask) == known.bytes) {  // the same key as at this position last time
      field = known.field;
      p += known.length;
    } else if (d[0] == op::kSetItems) {
      ++p;
      break;
    } else {
      std::uint64_t index;
      const std::size_t length = memo_ref(d, limit - p, index);
      if (length == 0) return false;
      p += length;
      field = field_of_key(index);
      const std::uint64_t mask = (std::uint64_t(1) << (8 * length)) - 1;
      known = {word & mask, mask, static_cast<std::uint32_t>(length), field};
      learn_prefix();
    }
    skip_frames<kFrames>(p);
    if (kFrames && p + 10 > limit) return false;
    switch (field) {
      case TraceField::Addr: case TraceField::Size: case TraceField::Stream: case TraceField::Time:
        if (!read_small_int(data + p, p, ints[static_cast<unsigned>(field)])) return false;
        read[static_cast<unsigned>(field)] = true;
        break;
      case TraceField::Action:
        if (!typed_action<kFrames>(p, known, f.action)) return false;
        break;
      case TraceField::Frames:
        if (!typed_frames<kFrames>(p, f.frames)) return false;
        if (f.frames.kind != Kind::Interned && f.frames.kind != Kind::List && f.frames.kind != Kind::Tuple &&
            f.frames.kind != Kind::None) {
          return false;
        }
        break;
      case TraceField::PoolId: case TraceField::UserMetadata: case TraceField::CompileContext:
      case TraceField::InternalMetadata: case TraceField::ForwardFrames: case TraceField::Category:
        if (!keyed_value<kFrames>(p, known, f.extra[extra_slot(field)], true)) return false;
        break;
      case TraceField::Ignored: {
        Value ignored;
        if (!typed_value<kFrames>(p, ignored, true)) return false;
        break;
      }
      case TraceField::Unknown: return false;
    }
  }
  if (ints[static_cast<unsigned>(TraceField::Size)] < 0) return false;  // the generic path reports it
  f.addr = static_cast<std::uint64_t>(ints[static_cast<unsigned>(TraceField::Addr)]);
  f.size = static_cast<std::uint64_t>(ints[static_cast<unsigned>(TraceField::Size)]);
  f.stream = ints[static_cast<unsigned>(TraceField::Stream)];
  f.time_us = ints[static_cast<unsigned>(TraceField::Time)];
  f.has_time = read[static_cast<unsigned>(TraceField::Time)];
  // The finished dict must not be used by what follows (it is never on the stack).
  std::size_t q = p;
  skip_frames<kFrames>(q);
  if (q >= fast_limit_ || (data_[q] != op::kEmptyDict && data_[q] != op::kAppends)) return false;
  p_io = p;
  return true;
}

template <bool kFrames>
bool PickleVm::typed_entry() {
  const std::size_t memo_before = memo_.size();
  std::size_t p = pos_;
  // The values absent (the ints and has_time are written on success): eight 16-byte stores, where
  // constructing a TraceFields took 47 instructions and copying an empty one 22.
  TraceFields& fields = typed_fields_;
  const Value none = Value::none();
  fields.action = none;
  fields.frames = none;
  for (Value& v : fields.extra) v = none;
  if (!typed_entry_fields<kFrames>(p, fields)) {
    memo_.resize(memo_before);
    return false;
  }
  released_any_ = true;
  pos_ = p;
  sink_->trace_fields(static_cast<std::size_t>(marks_.back().device), fields, doc_);
  ++info_.streamed_entries;
  return true;
}

// Decodes the entry inside the current frame without FRAME checks when it can (nearly always),
// else with them; the typed path first, then the key/value one.
bool PickleVm::try_fast_entry() {
  const bool frameless = info_.protocol < 4 || pos_ < frame_end_;
  if (frameless) {
    fast_limit_ = info_.protocol < 4 ? size_ : frame_end_;
    if (typed_entry<false>() || fast_entry<false>()) return true;
  }
  fast_limit_ = size_;
  return typed_entry<true>() || fast_entry<true>();
}

// The trace split's thread: try_fast_entry without the key/value path (the thread stops where the typed path cannot go).
bool PickleVm::typed_split_entry() {
  if (pos_ < frame_end_) {
    fast_limit_ = frame_end_;
    if (typed_entry<false>()) return true;
  }
  fast_limit_ = size_;
  return typed_entry<true>();
}

// After one fast entry the rest of the batch usually follows: take the entries in a loop rather
// than one dispatch each. Stops at the first byte that is not a new dict (APPENDS, usually) and
// at an entry the fast paths cannot take, which then goes the generic way.
void PickleVm::continue_fast_entries() {
  for (;;) {
    std::size_t p = pos_;
    if (p < size_ && data_[p] == op::kFrame) skip_frames_slow(p);
    if (p >= size_ || data_[p] != op::kEmptyDict) return;
    pos_ = p;
    advance_pager();
    op_pos_ = p;
    op_ = op::kEmptyDict;
    pos_ = p + 1;
    if (!try_fast_entry()) {
      push(doc_.new_container(Kind::Dict));
      return;
    }
  }
}

}  // namespace memsnap::pickle_vm
