// Internal to the reader: the pickle VM's state (marks, the compact memo) and the VM class,
// shared by pickle_reader.cpp (the generic opcode loop) and pickle_fast_path.cpp (the trace-entry
// fast path). Not part of memsnap's interface; include read/pickle_reader.h instead.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <cstdint>
#include <cstring>
#include <functional>
#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/big_vector.h"
#include "base/error.h"
#include "base/limits.h"
#include "read/frames_list_cache.h"
#include "read/mapping_pager.h"
#include "read/pickle_opcodes.h"
#include "read/pickle_reader.h"
#include "read/value.h"

namespace memsnap::pickle_vm {

// Interned tags of a trace split thread (trace_split.cpp): a slot it takes from the
// reader's memo as it stands at the split (the slot's number in the value the fast path copies
// out), and a stack it interned itself.
inline constexpr std::uint32_t kSplitSlotTag = 0x53504c54u;
inline constexpr std::uint32_t kSplitStackTag = 0x53504c53u;
inline bool is_split_slot(const Value& v) { return v.kind == Kind::Interned && v.aux == kSplitSlotTag; }

// Where a split thread finished a batch of entries: what the reader adopts up to there.
struct SplitCheckpoint {
  std::size_t pos = 0;        // just after the batch's APPENDS
  std::size_t frame_end = 0;  // the pickle frame there (0: no FRAME opcode seen yet)
  std::size_t events = 0;     // SplitTrace::events decoded by then
  std::size_t memo = 0;       // the memo's size then
  std::size_t stacks = 0;     // local stacks by then
};

class TraceSplitter;
struct EarlySplit;

struct MarkInfo {
  std::size_t pos;          // stack index where the marked items begin
  int device = -1;          // >= 0: the marked items are entries of device_traces[device]
  Document::Mark arena{};   // arena size when the mark was pushed (streaming only)
  std::size_t memo = 0;     // memo size when the mark was pushed (streaming only)
  bool dirty = false;       // something older than the mark was modified: do not release
};

// The pickle memo, compact: each slot is a 4-byte index into a value table. Released slots
// share one entry, short strings with equal bytes share one (a snapshot writes a fresh "N/A" per
// trace entry) and so do equal converted values (the stacks of the trace's frames lists), so
// millions of slots cost little more than their indices. Slots are
// dense from 0 as picklers write them; a BINPUT index past the end goes to a hash map instead of
// filling the gap (a few bytes of input must not make millions of slots), and overwriting a slot
// reuses its value entry, so the memo grows with the input, not with the indices it names.
class Memo {
 public:
  Memo() { values_.push_back(Value::released()); }
  // Dense slots: [0, size()) all exist.
  std::size_t size() const { return slots_.size(); }
  // Entries written: what MEMOIZE counts (Python's len(memo)).
  std::size_t count() const { return slots_.size() + sparse_.size(); }
  bool has_sparse() const { return !sparse_.empty(); }
  const Value& operator[](std::size_t i) const { return values_[slots_[i]]; }
  // The value at any index, nullptr when nothing was written there.
  const Value* find(std::size_t i) const {
    if (i < slots_.size()) return &values_[slots_[i]];
    const auto it = sparse_.find(i);
    return it == sparse_.end() ? nullptr : &values_[it->second];
  }
  void push_back(const Value& v) {
    slots_.push_back(store(v));
    if (!sparse_.empty()) [[unlikely]] adopt_sparse();
  }
  void push_released() {
    slots_.push_back(0);
    if (!sparse_.empty()) [[unlikely]] adopt_sparse();
  }
  // The value entry of the slot pushed last, and an entry by its index: a short str's entry
  // is never overwritten (see restore), so it names the same str for as long as the memo lives.
  std::uint32_t last_entry() const { return slots_[slots_.size() - 1]; }
  const Value& entry(std::uint32_t e) const { return values_[e]; }
  // Pushes a slot holding the interned value of entry e (what push_back of an equal value stores).
  void push_interned(std::uint32_t e) {
    slots_.push_back(e);
    if (!sparse_.empty()) [[unlikely]] adopt_sparse();
  }
  // Pushes a slot holding the short str of entry e (what push_back of an equal str stores).
  void push_short_str(std::uint32_t e) {
    slots_.push_back(e);
    last_short_ = e;
    if (!sparse_.empty()) [[unlikely]] adopt_sparse();
  }
  void set(std::size_t i, const Value& v) {
    ++slot_epoch_;
    low_water_ = std::min(low_water_, i);
    slots_[i] = restore(slots_[i], v);
    if (i < frame_ids_.size()) forget_frame(i);
  }
  // Slot i's container, released with its batch, replaced by what the sink converted it to: the
  // same frame (or stack) as an interned value, so a cached frame id stays valid.
  void set_converted(std::size_t i, const Value& v) {
    ++slot_epoch_;
    low_water_ = std::min(low_water_, i);
    slots_[i] = restore(slots_[i], v);
  }
  // The sink's frame id for the frame value at dense slot i, cached until the slot changes.
  bool cached_frame(std::size_t i, std::uint32_t& id) const {
    if (i >= frame_ids_.size() || frame_ids_[i] == 0) return false;
    id = frame_ids_[i] - 1;
    return true;
  }
  // The frame-id cache as an array (entry: id + 1, 0 when not cached), for the frames-list loop;
  // valid until the next cache_frame, set or resize.
  const std::uint32_t* frame_cache() const { return frame_ids_.data(); }
  std::size_t frame_cache_size() const { return frame_ids_.size(); }
  void cache_frame(std::size_t i, std::uint32_t id) {
    if (i >= frame_ids_.size()) frame_ids_.resize(std::max(i + 1, std::min(slots_.size(), 2 * frame_ids_.size())), 0);
    frame_ids_[i] = id + 1;
  }
  void set_sparse(std::size_t i, const Value& v) {
    low_water_ = std::min(low_water_, i);
    const auto it = sparse_.find(i);
    if (it == sparse_.end()) return void(sparse_.emplace(i, store(v)));
    ++slot_epoch_;
    it->second = restore(it->second, v);
  }
  void resize(std::size_t n) {
    if (n < slots_.size()) ++generation_, ++slot_epoch_, low_water_ = std::min(low_water_, n);
    for (std::size_t k = n; k < std::min(slots_.size(), frame_ids_.size()); ++k) forget_frame(k);
    slots_.resize(n, 0);
  }
  // Changes whenever a slot's cached frame id is dropped (the slot overwritten or popped), so what
  // was derived from the frame ids of given slots stays valid while it is unchanged.
  std::uint64_t frame_epoch() const { return frame_epoch_; }
  // Changes whenever a slot that held a str is overwritten or dropped, so a cache of what the
  // strs at given indices mean stays valid while it is unchanged.
  std::uint64_t generation() const { return generation_; }
  // Changes whenever any slot's value is overwritten or dropped (a slot only pushed since keeps
  // it), so what was derived from the values of given slots stays valid while it is unchanged.
  std::uint64_t slot_epoch() const { return slot_epoch_; }
  // Entries of the value table (the shared released entry included).
  std::size_t value_entries() const { return values_.size(); }

  // ---- for the trace split (trace_split.cpp) ----
  // The lowest slot overwritten or dropped since the last reset_low_water (SIZE_MAX: none).
  std::size_t low_water() const { return low_water_; }
  void reset_low_water() { low_water_ = SIZE_MAX; }
  // The threads' memo: this one's slots, each container (of the reader's arena: nearly every
  // value before the trace, the segments' blocks and lists) held as one shared `marker` entry, the
  // rest copied once each; fill_split_slots then adds `marker` slots up to `base` (the slots the
  // reader writes before the split). The lookup caches start empty.
  Memo split_copy(const Value& marker) const {
    Memo copy;
    copy.split_marker_ = copy.append(marker);
    std::vector<std::uint32_t> entry_of(values_.size(), UINT32_MAX);
    entry_of[0] = 0;  // released
    copy.slots_.resize(slots_.size(), 0);
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      std::uint32_t& e = entry_of[slots_[i]];
      if (e == UINT32_MAX) e = values_[slots_[i]].is_container() ? copy.split_marker_ : copy.append(values_[slots_[i]]);
      copy.slots_[i] = e;
    }
    copy.frame_ids_ = frame_ids_;
    copy.sparse_ = sparse_;  // empty: no split is started with sparse slots
    copy.generation_ = generation_;
    copy.frame_epoch_ = frame_epoch_;
    copy.slot_epoch_ = slot_epoch_;
    return copy;
  }
  void fill_split_slots(std::size_t base) { slots_.resize(std::max(base, slots_.size()), split_marker_); }
  // A split thread's memo learned from the bytes before the reader got there (memo_skim.h):
  // `puts` slots, each holding `marker` but for the strs (slot, value) the walk saw memoized.
  static Memo split_from_strs(const Value& marker, std::size_t puts,
                              const std::vector<std::pair<std::size_t, Value>>& strs) {
    Memo m;
    m.split_marker_ = m.append(marker);
    m.slots_.resize(puts, m.split_marker_);
    for (const auto& [slot, v] : strs) m.slots_[slot] = m.store(v);
    return m;
  }
  // The value entry an equal value would be stored in (a new one when none is shared).
  std::uint32_t entry_for(const Value& v) { return store(v); }
  // The value entry of dense slot i; appends dense slots holding the given entries.
  std::uint32_t slot_entry(std::size_t i) const { return slots_[i]; }
  void append_entries(const std::uint32_t* entries, std::size_t count) { slots_.append(entries, count); }

 private:
  void forget_frame(std::size_t i) {
    if (frame_ids_[i] != 0) {
      frame_ids_[i] = 0;
      ++frame_epoch_;
    }
  }
  // The slot just pushed replaces a sparse entry at the same index (a later put wins).
  void adopt_sparse() { slot_epoch_ += sparse_.erase(slots_.size() - 1); }
  // Overwrites the value entry `old` with v, reusing it when no other slot shares it.
  std::uint32_t restore(std::uint32_t old, const Value& v) {
    const Value& was = values_[old];
    if (was.kind == Kind::Str) ++generation_;
    const bool shared = old == 0 || is_short_str(was) || was.kind == Kind::Interned;
    if (shared || v.kind == Kind::Released || is_short_str(v) || v.kind == Kind::Interned) return store(v);
    values_[old] = v;
    return old;
  }
  static bool is_short_str(const Value& v) { return v.kind == Kind::Str && v.aux <= 32; }
  std::uint32_t store(const Value& v) {
    if (v.kind == Kind::Released) return 0;
    if (v.kind == Kind::Interned) {
      // Equal converted values share an entry: a trace's frames lists repeat a few thousand
      // stacks, and its entries' slots would otherwise hold one 16-byte value each.
      std::uint32_t& cached = interned_[((v.u ^ (std::uint64_t(v.aux) << 40)) * 0x9e3779b97f4a7c15ull) >> 56];
      const Value& c = values_[cached];
      if (cached && c.kind == Kind::Interned && c.aux == v.aux && c.u == v.u) return cached;
      cached = append(v);
      return cached;
    }
    if (is_short_str(v)) {
      // The str stored last first: a snapshot repeats one ("N/A") in every trace entry.
      if (last_short_ && values_[last_short_].aux == v.aux && same_bytes(values_[last_short_].s, v.s, v.aux)) return last_short_;
      std::uint64_t h = 0xcbf29ce484222325ull;
      for (std::uint32_t k = 0; k < v.aux; ++k) h = (h ^ static_cast<std::uint8_t>(v.s[k])) * 0x100000001b3ull;
      std::uint32_t& cached = short_strings_[h & 255];
      if (!cached || values_[cached].aux != v.aux || !same_bytes(values_[cached].s, v.s, v.aux)) cached = append(v);
      last_short_ = cached;
      return cached;
    }
    return append(v);
  }
  static bool same_bytes(const char* a, const char* b, std::uint32_t n) {
    for (std::uint32_t k = 0; k < n; ++k) {
      if (a[k] != b[k]) return false;
    }
    return true;
  }
  std::uint32_t append(const Value& v) {
    if (values_.size() >= limits::kMaxMemoEntries || values_.size() * sizeof(Value) > limits::memory_budget_bytes()) {
      throw InputError("the pickle memo exceeds memsnap's limit", kRecaptureRemedy);
    }
    values_.push_back(v);
    return static_cast<std::uint32_t>(values_.size() - 1);
  }
  BigVector<std::uint32_t> slots_;
  BigVector<std::uint32_t> frame_ids_;  // dense slot -> frame id + 1 (0: not cached); 0 at >= size()
  absl::flat_hash_map<std::uint64_t, std::uint32_t> sparse_;  // index -> value entry, past the dense end
  BigVector<Value> values_;  // grows by mremap: never an old and a new copy at once
  std::uint32_t short_strings_[256] = {};
  std::uint32_t interned_[256] = {};  // value index of a converted value, by its hash (0: none)
  std::uint32_t last_short_ = 0;  // value index of the short str stored last (0: none)
  std::uint64_t generation_ = 0;
  std::uint64_t frame_epoch_ = 0;
  std::uint64_t slot_epoch_ = 0;
  std::size_t low_water_ = SIZE_MAX;
  std::uint32_t split_marker_ = 0;
};

// Where a split thread starts: `from` with a copy of the reader's memo there, or (started with
// the read) `at` of what follows the trace's first batch, with the memo `early` skims.
struct SplitStart {
  Memo memo;
  std::size_t from = 0;
  std::shared_ptr<EarlySplit> early;
  double at = 0;
};

// The frames list being decoded, as frame ids: a buffer the frames-list loop writes through a
// plain pointer (a std::vector's push_back reloads its end pointers after every store).
class FrameIdList {
 public:
  std::size_t size() const { return size_; }
  const std::uint32_t* data() const { return ids_.data(); }
  void clear() { size_ = 0; }
  void push_back(std::uint32_t id) {
    if (size_ == ids_.size()) grow();
    ids_[size_++] = id;
  }
  // Where the next id goes and where the room ends; commit(next) records what was written.
  std::uint32_t* next() { return ids_.data() + size_; }
  std::uint32_t* room_end() { return ids_.data() + ids_.size(); }
  void commit(const std::uint32_t* next) { size_ = static_cast<std::size_t>(next - ids_.data()); }
  void grow() { ids_.resize(std::max<std::size_t>(256, 2 * ids_.size())); }

 private:
  std::vector<std::uint32_t> ids_;
  std::size_t size_ = 0;
};

class PickleVm {
 public:
  PickleVm(std::span<const std::uint8_t> bytes, Document& doc, TraceEntrySink* sink, bool drop_pages);
  ~PickleVm();  // both in trace_split.cpp, where TraceSplitter is complete

  PickleInfo run();
  void set_split_tuning(const SplitTuning& tuning) { split_tuning_ = tuning; }

  // ---- the trace split's threads (trace_split.cpp) ----
  // Decodes batches of trace entries from `start` (a batch's MARK) with `memo`, the typed fast
  // path only, until an entry it does not take, the end of the list or `stop`; a checkpoint at
  // every batch end.
  // drop_pages: hand back the file's pages behind it (MappingPager, on this thread).
  // end(): where its part ends (the next thread's start), asked at each batch.
  void run_split(std::size_t start, bool drop_pages, Memo memo, const SplitTrace& trace,
                 std::vector<SplitCheckpoint>& checkpoints, const std::atomic<bool>& stop,
                 const std::function<std::size_t()>& end);
  const Memo& memo() const { return memo_; }

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
    if (index >= limits::kMaxMemoEntries) corrupt(fmt::format("memo index {} is beyond memsnap's limit", index));
    if (index == memo_.size()) {
      memo_.push_back(v);
      return;
    }
    if (index > memo_.size()) {
      // Not converted when a trace batch is released: keep every open batch.
      for (auto& m : marks_) {
        if (m.device >= 0) m.dirty = true;
      }
      memo_.set_sparse(index, v);
      return;
    }
    if (!marks_.empty() && marks_.back().device >= 0 && index < marks_.back().memo) marks_.back().dirty = true;
    memo_.set(index, v);
  }
  void memo_get(std::uint64_t index) {
    const Value* v = memo_.find(index);
    if (!v || v->kind == Kind::Released) {
      if (v && released_any_) {
        corrupt(fmt::format("memo entry {} refers to a trace entry object that was shared in an unexpected way", index));
      }
      corrupt(fmt::format("memo entry {} is read before it was written", index));
    }
    push(*v);
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
      if (p < size_ && data_[p] == op::kFrame) [[unlikely]] skip_frames_slow(p);
    }
  }
  void skip_frames_slow(std::size_t& p);  // also notes where the frame ends
  bool try_fast_entry();
  bool typed_split_entry();
  bool try_reference_list();
  void continue_fast_entries();
  template <bool kFrames>
  bool typed_entry();
  template <bool kFrames>
  bool typed_entry_fields(std::size_t& p, TraceFields& fields);
  struct KeyBytes;
  template <bool kFrames>
  KeyBytes* typed_prefix(std::size_t& p, TraceFields& fields, std::int64_t* ints, bool* read);
  void learn_prefix();
  template <bool kFrames>
  bool keyed_value(std::size_t& p, KeyBytes& known, Value& v, bool allow_tuple);
  template <bool kFrames>
  bool typed_action(std::size_t& p, KeyBytes& known, Value& action);
  TraceField field_of_key(std::uint64_t index);
  template <bool kFrames>
  bool typed_value(std::size_t& p, Value& v, bool allow_tuple);
  template <bool kFrames>
  bool typed_frames(std::size_t& p, Value& v);
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
  bool fast_memo_next(std::size_t& p, bool& memoized);
  template <bool kFrames>
  bool fast_memo_get(std::size_t& p, Value& out);
  template <bool kFrames>
  bool fast_frames(std::size_t& p, Value& out);
  template <bool kFrames>
  bool fast_frame_id(std::size_t& p);
  bool frame_ids_in_frame(std::size_t& p);
  void push_long(const std::uint8_t* bytes, std::size_t n);
  void dispatch();
  [[noreturn]] void refuse() const;

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
  static constexpr std::size_t kMaxFastPairs = 128;  // keys and values of one entry (PyTorch: ~20)
  Value fast_pairs_[kMaxFastPairs];
  FrameIdList fast_frame_ids_;  // the frames list being decoded, as frame ids
  TraceFields typed_fields_;    // the entry typed_entry decodes
  FramesListCache frames_lists_;  // stacks of the trace's frames lists by their bytes
  CachedStack* cached_frames_list(std::size_t& p, std::uint64_t& hash);
  void memoize_cached_stack(CachedStack& cached);
  ReferenceListCache reference_list_bytes_;  // lists outside the trace by their bytes
  bool share_earlier_list(std::size_t p, std::size_t limit, std::uint64_t& hash, std::size_t& length);
  std::vector<Value> reference_values_;  // the items of the list try_reference_list decodes
  // Lists of memo references outside the trace by the hash of their items -> the first such
  // container: an equal list shares its items (Document::share_items). Blocks' frames lists
  // repeat a few hundred distinct stacks; 16 bytes an item for each was most of the arena.
  absl::flat_hash_map<std::uint64_t, std::uint64_t> reference_lists_;
  void append_reference_list(const Value& list);
  bool streaming() const;
  // The exact bytes of the key opcode seen at each position (BINGET i or LONG_BINGET iiii), compared as
  // one masked 8-byte word; valid while the memo generation is `key_bytes_generation_`.
  struct KeyBytes {
    std::uint64_t bytes = 1, mask = 0;  // matches nothing until learned
    std::uint32_t length = 0;
    TraceField field = TraceField::Unknown;
    // The memoized short str read last after this key (SHORT_BINUNICODE n, its bytes, MEMOIZE:
    // at most 8 bytes; compile_context's "N/A" in every entry) and its memo value entry.
    std::uint64_t str_bytes = 1, str_mask = 0;
    std::uint32_t str_length = 0, str_entry = 0;
  };
  static constexpr std::size_t kKeySlots = 16;
  KeyBytes key_bytes_[kKeySlots];
  std::uint64_t key_bytes_generation_ = 0;
  // How many leading positions' learned keys are PyTorch's first ones, action, addr, size, stream
  // and time_us (4 or 5; 0: not these), which typed_prefix decodes without the per-key dispatch.
  unsigned typed_prefix_ = 0;
  std::size_t frame_end_ = 0;   // end of the current pickle frame (no FRAME opcode before it)
  std::size_t fast_limit_ = 0;  // the fast path reads no byte at or past this
  PickleInfo info_;
  bool stopped_ = false;
  bool released_any_ = false;
  std::optional<MappingPager> pager_;  // for a file mapping: release-behind, map-ahead
  // The trace split (trace_split.cpp): started at a batch MARK of a long trace, each thread
  // adopted at the MARK where it started.
  SplitTuning split_tuning_{.enabled = false};
  bool split_tried_ = false;
  std::size_t split_trace_from_ = SIZE_MAX;  // where the first streamed batch began, and its entries
  std::size_t split_entries_from_ = 0;
  std::vector<std::unique_ptr<TraceSplitter>> splits_;  // by start; those before next_split_ are done
  std::size_t next_split_ = 0;
  bool may_split() const;
  void maybe_start_early_split();
  void maybe_start_split();
  void start_split_threads(double first, const std::function<SplitStart(double)>& start_at);
  bool early_split_alive() const;
  void stop_splits();
  bool skimmed_strs_hold(const TraceSplitter& split) const;
  std::size_t split_threads() const;
  bool adopt_splits(const MarkInfo& mark);  // at a batch MARK: what the thread that started there decoded
  bool adopt_split(TraceSplitter& split, const MarkInfo& mark);
  std::size_t valid_split_checkpoints(const TraceSplitter& split) const;
  void append_split_memo(const TraceSplitter& split, const SplitCheckpoint& at, const std::vector<Value>& stacks);
  std::size_t next_advance_ = 0;
  void advance_pager() {
    if (pager_ && pos_ >= next_advance_) {
      pager_->advance(pos_);
      next_advance_ = pos_ + MappingPager::kStep / 4;
    }
  }
};

}  // namespace memsnap::pickle_vm
