// The trace split (see read/split_trace.h): a split thread's sink and driver, and how the
// reader checks and adopts what it decoded (where the thread starts: split_start.cpp).
#include <absl/container/flat_hash_map.h>
#include <absl/hash/hash.h>
#include <absl/types/span.h>

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <ctime>
#include <optional>
#include <string_view>
#include <thread>

#include "base/parallel.h"
#include "base/phase_timer.h"
#include "read/memo_skim.h"
#include "read/pickle_vm.h"
#include "read/split_start.h"

namespace memsnap::pickle_vm {

namespace {
// A split thread meets something the reader must decode itself: its work ends at the last
// batch it finished.
struct SplitStop {};
}  // namespace

// Entries of PyTorch's usual shape, into SplitTrace; anything that would make the builder do
// more than trace_fields' plain path (a 2026 field with content, a new frame dict, a container
// the reader's arena holds) stops the thread.
class SplitSink final : public TraceEntrySink {
 public:
  SplitSink(TraceEntrySink& reader_sink, SplitTrace& out) : reader_sink_(reader_sink), out_(out) {}

  void trace_entry(std::size_t, const Value&, const Document&) override { throw SplitStop{}; }
  void trace_entry_fields(std::size_t, const Value*, std::size_t, const Document&) override { throw SplitStop{}; }
  TraceField trace_field(std::string_view key) override { return reader_sink_.trace_field(key); }
  void trace_fields(std::size_t, const TraceFields& f, const Document&) override {
    check_no_event_facts(f);
    SplitEvent e;
    e.addr = f.addr;
    e.size = f.size;
    e.time_us = f.time_us;
    e.has_time = f.has_time;
    e.action = action_index(f.action);
    e.stream = stream_index(f.stream);
    e.stack = stack_ref(f.frames);
    if (SplitTrace::is_reference(e.stack)) out_.reference_events.push_back(out_.events.size());
    out_.events.push_back(e);
  }
  std::uint32_t frame_id(const Value& frame, const Document&) override {
    if (frame.kind != Kind::Interned || is_split_slot(frame) || frame.aux == kSplitStackTag) throw SplitStop{};
    return SplitTrace::kValue | value_index(frame);
  }
  Value intern_frame_ids(const std::uint32_t* ids, std::size_t count) override {
    const std::uint64_t h = absl::HashOf(absl::MakeConstSpan(ids, count));
    const auto k = static_cast<std::uint32_t>(out_.stack_count());
    const auto [it, inserted] = stacks_.try_emplace(h, k);
    if (!inserted) {
      for (std::uint32_t c = it->second; c != kNone; c = same_hash_[c]) {
        const std::uint32_t* begin = out_.stack_frames.data() + out_.stack_offsets[c];
        if (out_.stack_offsets[c + 1] - out_.stack_offsets[c] == count && std::equal(ids, ids + count, begin)) {
          return Value::interned(kSplitStackTag, c);
        }
      }
    }
    if (k >= SplitTrace::kIndex) throw SplitStop{};
    same_hash_.push_back(inserted ? kNone : it->second);
    it->second = k;
    out_.stack_frames.insert(out_.stack_frames.end(), ids, ids + count);
    out_.stack_offsets.push_back(static_cast<std::uint32_t>(out_.stack_frames.size()));
    out_.stack_first.push_back(out_.events.size());  // the entry being decoded
    return Value::interned(kSplitStackTag, k);
  }
  std::optional<Value> converted(std::uint64_t) override { return std::nullopt; }
  void released(std::uint64_t) override {}

 private:
  // What has_no_event_facts (model/builder_2026.cpp) passes, in its plainest form: every 2026
  // field absent or an empty str, compile_context also "N/A".
  static void check_no_event_facts(const TraceFields& f) {
    if (plainly_no_event_facts(f)) return;  // the usual entry
    constexpr unsigned kContext = extra_slot(TraceField::CompileContext);
    for (unsigned k = 0; k < kTraceExtraCount; ++k) {
      const Value& v = f.extra[k];
      if (v.kind == Kind::None) continue;
      if (v.kind != Kind::Str || k == extra_slot(TraceField::PoolId) || k == extra_slot(TraceField::ForwardFrames)) {
        throw SplitStop{};
      }
      if (v.aux != 0 && !(k == kContext && v.str() == "N/A")) throw SplitStop{};
    }
  }
  std::uint8_t action_index(const Value& action) {
    for (std::size_t k = 0; k < out_.actions.size(); ++k) {
      const Value& a = out_.actions[k];
      if (a.kind == action.kind && a.aux == action.aux && a.u == action.u) return static_cast<std::uint8_t>(k);
    }
    if (out_.actions.size() >= 255) throw SplitStop{};
    out_.actions.push_back(action);
    out_.action_first.push_back(out_.events.size());
    return static_cast<std::uint8_t>(out_.actions.size() - 1);
  }
  std::uint16_t stream_index(std::int64_t stream) {
    if (last_stream_ < out_.streams.size() && out_.streams[last_stream_] == stream) return last_stream_;
    for (std::size_t k = 0; k < out_.streams.size(); ++k) {
      if (out_.streams[k] == stream) return last_stream_ = static_cast<std::uint16_t>(k);
    }
    if (out_.streams.size() >= 0xffff) throw SplitStop{};
    out_.streams.push_back(stream);
    out_.stream_first.push_back(out_.events.size());
    return last_stream_ = static_cast<std::uint16_t>(out_.streams.size() - 1);
  }
  std::uint32_t stack_ref(const Value& frames) {
    if (frames.kind == Kind::None) return SplitTrace::kNoStack;
    if (frames.kind != Kind::Interned) throw SplitStop{};  // a container of the thread's own arena
    if (frames.aux == kSplitStackTag) return static_cast<std::uint32_t>(frames.u);
    if (is_split_slot(frames)) return SplitTrace::kSlot | static_cast<std::uint32_t>(frames.u);
    return SplitTrace::kValue | value_index(frames);
  }
  std::uint32_t value_index(const Value& v) {
    const auto [it, inserted] = values_.try_emplace(std::make_pair(v.aux, v.u), static_cast<std::uint32_t>(out_.values.size()));
    if (inserted) {
      if (out_.values.size() >= SplitTrace::kIndex) throw SplitStop{};
      out_.values.push_back(v);
    }
    return it->second;
  }

  TraceEntrySink& reader_sink_;
  SplitTrace& out_;
  static constexpr std::uint32_t kNone = UINT32_MAX;
  absl::flat_hash_map<std::uint64_t, std::uint32_t> stacks_;  // the latest local stack by its frames' hash
  std::vector<std::uint32_t> same_hash_;  // by local stack: the one before it with the same hash (kNone)
  absl::flat_hash_map<std::pair<std::uint32_t, std::uint64_t>, std::uint32_t> values_;
  std::uint16_t last_stream_ = 0xffff;
};

namespace {
constexpr int kNice = 19;  // a split thread's priority: below the reader's and the event store's

// MEMSNAP_PROFILE: what a split thread did, printed when it ends (bench/README §21).
class SplitProfile {
 public:
  SplitProfile() : begin_(std::chrono::steady_clock::now()), skimmed_(begin_) {}
  void skimmed() { skimmed_ = std::chrono::steady_clock::now(); }
  void based() { based_ = std::chrono::steady_clock::now(); }
  void print(std::size_t start, const std::vector<SplitCheckpoint>& checkpoints) const {
    if (!profiling_enabled()) return;
    const auto now = std::chrono::steady_clock::now();
    const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    timespec cpu{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    rusage use{};
    getrusage(RUSAGE_THREAD, &use);
    const SplitCheckpoint last = checkpoints.empty() ? SplitCheckpoint{.pos = start} : checkpoints.back();
    std::fprintf(stderr,
                 "memsnap: profile: split thread: memo skimmed in %.1f ms, start at byte %zu, base learned in %.1f ms, "
                 "then %.1f ms decoding %zu entries (%.1f MB); thread CPU %.1f ms, %ld minor / %ld major faults\n",
                 ms(skimmed_ - begin_), start, ms(based_ - skimmed_), ms(now - based_), last.events,
                 static_cast<double>(last.pos - start) / 1e6,
                 static_cast<double>(cpu.tv_sec) * 1e3 + static_cast<double>(cpu.tv_nsec) / 1e6, use.ru_minflt, use.ru_majflt);
  }

 private:
  std::chrono::steady_clock::time_point begin_, skimmed_, based_;
};
}  // namespace

// The threads started with the read: the memo before the trace, skimmed once by whichever asks first.
struct EarlySplit {
  std::once_flag once;
  std::optional<MemoSkim> skim;
  const MemoSkim* get(std::span<const std::uint8_t> bytes, const std::atomic<bool>& stop) {
    std::call_once(once, [&] { skim = skim_memo_to_trace(bytes.data(), bytes.size(), bytes.size() / 2, stop); });
    return skim ? &*skim : nullptr;
  }
};

// ---- a split thread ----

class TraceSplitter {
 public:
  // `next`: the thread that starts after this one (nullptr: none), whose start ends this one's part.
  TraceSplitter(std::span<const std::uint8_t> bytes, SplitStart start, const TraceSplitter* next, const SplitTuning& tuning,
                bool drop_pages, TraceEntrySink& reader_sink)
      : next_(next), wait_(tuning.wait), drop_pages_(drop_pages), base_error_(tuning.base_error),
        skim_error_(tuning.skim_error), min_bytes_(tuning.min_bytes), min_entry_bytes_(tuning.min_entry_bytes),
        early_(start.early), copied_(start.memo.size()), sink_(reader_sink, trace_), vm_(bytes, doc_, &sink_, false) {
    thread_ = std::thread([this, bytes, start = std::move(start)]() mutable { work(bytes, std::move(start)); });
  }
  ~TraceSplitter() { finish(); }
  // Stops the thread at its next batch end (`stop`) or lets it run to its own end, and joins it.
  void finish(bool stop = true) {
    if (stop) stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
  }

  // The MARK it starts at once it knows; kPending before, kNone when it found none to start at.
  static constexpr std::size_t kPending = SIZE_MAX, kNone = SIZE_MAX - 1;
  std::size_t start() const { return start_.load(std::memory_order_acquire); }
  // Blocks until start() is no longer kPending (tests: SplitTuning::wait).
  void wait_for_start() const { start_.wait(kPending, std::memory_order_acquire); }
  std::size_t base() const { return base_; }    // the memo size it assumed there (after finish)
  bool from_start() const { return early_ != nullptr; }  // started with the read
  std::size_t copied() const { return copied_; }  // slots it copied from the reader's memo (or skimmed)
  // The strs it took from the skim (slot, value): the reader's memo must hold the same (after finish).
  const std::vector<std::pair<std::size_t, Value>>& skimmed_strs() const { return skimmed_; }
  const std::vector<SplitCheckpoint>& checkpoints() const { return checkpoints_; }
  const SplitTrace& trace() const { return trace_; }
  SplitTrace& trace() { return trace_; }
  const Memo& memo() const { return vm_.memo(); }

 private:
  void work(std::span<const std::uint8_t> bytes, SplitStart where) {
    // The reader and the event store's worker come first: this thread takes the CPU they leave.
    setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), kNice);
    SplitProfile profile;
    try {
      Memo memo = std::move(where.memo);
      std::size_t from = where.from;
      if (early_) {
        const MemoSkim* skim = early_->get(bytes, stop_);
        if (!skim || bytes.size() - skim->end < min_bytes_ || skim->puts >= limits::kMaxMemoEntries) {
          return set_start(kNone);
        }
        skimmed_ = skim->strs;
        if (skim_error_) swap_addr_and_size();
        memo = Memo::split_from_strs(Value::interned(kSplitSlotTag, 0), skim->puts, skimmed_);
        copied_ = 0;  // nothing copied: the skimmed strs are checked against the reader's memo at the start
        from = skim->end + static_cast<std::size_t>(static_cast<double>(bytes.size() - skim->end) * where.at);
        profile.skimmed();
      }
      const auto start = find_batch_start(bytes.data(), bytes.size(), from);
      const auto learned = start ? learn_memo_base(bytes.data(), bytes.size(), *start, memo, sink_) : std::nullopt;
      // Started with the read, the thread itself checks that the entries are long enough to split
      // (the reader checks the first ones before it starts threads at the trace).
      const bool short_entries = learned && early_ && learned->entry_bytes < min_entry_bytes_;
      std::optional<std::size_t> base;
      if (learned && !short_entries) {
        base = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(learned->base) + base_error_);
      }
      if (!base || *base >= limits::kMaxMemoEntries || stop_.load(std::memory_order_relaxed)) {
        set_start(kNone);
        return;
      }
      memo.fill_split_slots(*base);
      base_ = *base;
      set_start(*start);
      profile.based();
      vm_.run_split(*start, drop_pages_, std::move(memo), trace_, checkpoints_, stop_, [this] { return end(); });
      profile.print(*start, checkpoints_);
    } catch (...) {
      // SplitStop, a limit, a malformed byte: the checkpoints so far stand; the reader decodes the rest.
      if (base_ != 0) profile.print(start_.load(), checkpoints_);
      std::size_t pending = kPending;
      start_.compare_exchange_strong(pending, kNone);
      start_.notify_all();
    }
  }
  void swap_addr_and_size() {
    Value* addr = nullptr;
    for (auto& [slot, v] : skimmed_) {
      if (v.str() != "addr" && v.str() != "size") continue;
      if (!addr) addr = &v;
      else std::swap(*addr, v);
    }
  }
  void set_start(std::size_t start) {
    start_.store(start, std::memory_order_release);
    start_.notify_all();
  }
  // Where this thread's part ends: the start of the first later thread that found one (SIZE_MAX
  // while none has; tests wait until each knows).
  std::size_t end() const {
    for (const TraceSplitter* s = next_; s; s = s->next_) {
      if (wait_) s->wait_for_start();
      const std::size_t at = s->start();
      if (at == kPending) return SIZE_MAX;
      if (at != kNone) return at;
    }
    return SIZE_MAX;
  }

  const TraceSplitter* next_;
  bool wait_;
  std::atomic<std::size_t> start_{kPending};
  bool drop_pages_;
  std::ptrdiff_t base_error_;
  bool skim_error_;
  std::size_t min_bytes_, min_entry_bytes_;
  std::shared_ptr<EarlySplit> early_;
  std::vector<std::pair<std::size_t, Value>> skimmed_;  // the strs its memo took from the skim
  std::size_t base_ = 0;
  std::size_t copied_;
  SplitTrace trace_;
  Document doc_;
  SplitSink sink_;
  PickleVm vm_;
  std::vector<SplitCheckpoint> checkpoints_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

PickleVm::PickleVm(std::span<const std::uint8_t> bytes, Document& doc, TraceEntrySink* sink, bool drop_pages)
    : data_(bytes.data()), size_(bytes.size()), doc_(doc), sink_(sink) {
  stack_.reserve(4096);
  if (drop_pages) pager_.emplace(data_, size_);
}

PickleVm::~PickleVm() {
  // Every thread stopped before any is destroyed: each reads the start of the one after it.
  for (auto& split : splits_) {
    if (split) split->finish();
  }
}

void PickleVm::run_split(std::size_t start, bool drop_pages, Memo memo, const SplitTrace& trace,
                         std::vector<SplitCheckpoint>& checkpoints, const std::atomic<bool>& stop,
                         const std::function<std::size_t()>& end) {
  memo_ = std::move(memo);
  if (drop_pages) pager_.emplace(data_, size_, start, false);  // hands back what it read behind it
  info_.protocol = 4;
  frame_end_ = 0;
  pos_ = start;
  const std::size_t containers = doc_.mark().containers;
  for (;;) {
    std::size_t p = pos_;
    skip_frames_slow(p);
    if (p >= size_ || data_[p] != op::kMark) return;  // the list ends
    if (p > start && p >= end()) return;               // where the next thread started
    pos_ = p + 1;
    advance_pager();
    marks_.assign(1, MarkInfo{.pos = 0, .device = 0});
    for (;;) {
      p = pos_;
      skip_frames_slow(p);
      if (p < size_ && data_[p] == op::kEmptyDict) {
        op_pos_ = p;
        op_ = op::kEmptyDict;
        pos_ = p + 1;
        if (!typed_split_entry()) return;
        continue;
      }
      if (p >= size_ || data_[p] != op::kAppends) return;
      pos_ = p + 1;
      break;
    }
    if (doc_.mark().containers != containers) return;  // a value of the thread's own arena was memoized
    checkpoints.push_back({pos_, frame_end_, trace.events.size(), memo_.size(), trace.stack_count()});
    if (stop.load(std::memory_order_relaxed)) return;
  }
}

// ---- the reader's side ----

bool PickleVm::may_split() const {
  return sink_ && split_tuning_.enabled && (worker_count() >= 2 || split_tuning_.on_one_core);
}

// With the read: the threads skim the memo before the trace and start in it while the reader
// decodes what comes before (the segments: a quarter of the read with C++ frames, bench/README §28).
void PickleVm::maybe_start_early_split() {
  if (!may_split() || !split_tuning_.early || size_ < split_tuning_.min_bytes || size_ < 2 || data_[1] < 4) return;
  const double first = split_tuning_.at > 0 ? split_tuning_.at : 1.0 / static_cast<double>(split_threads() + 1);
  auto early = std::make_shared<EarlySplit>();
  start_split_threads(first, [&](double at) { return SplitStart{.memo = {}, .from = 0, .early = early, .at = at}; });
  memo_.reset_low_water();
}

// At the trace's first batches: whether the trace is worth splitting, and the threads if none
// started with the read (or those found no start).
void PickleVm::maybe_start_split() {
  if (!may_split() || info_.protocol < 4 || memo_.has_sparse() || size_ - pos_ < split_tuning_.min_bytes) {
    split_tried_ = true;
    return stop_splits();
  }
  if (split_trace_from_ == SIZE_MAX) split_trace_from_ = pos_, split_entries_from_ = info_.streamed_entries;
  if (info_.streamed_entries < split_tuning_.after_entries) return;
  split_tried_ = true;
  // Entries of a few dozen bytes (Python frames only) cost the event store's worker, pairing the
  // thread's events after the split, nearly what they save: no split (bench/README §17).
  const std::size_t entries = info_.streamed_entries - split_entries_from_;
  if (entries == 0 || (pos_ - split_trace_from_) / entries < split_tuning_.min_entry_bytes) return stop_splits();
  if (early_split_alive()) return;
  stop_splits();
  const double first = split_tuning_.at > 0 ? split_tuning_.at : 1.0 / static_cast<double>(split_threads() + 1);
  const Memo copy = memo_.split_copy(Value::interned(kSplitSlotTag, 0));
  start_split_threads(first, [&](double at) {
    const auto from = pos_ + static_cast<std::size_t>(static_cast<double>(size_ - pos_) * at);
    return SplitStart{.memo = Memo(copy), .from = from, .early = nullptr, .at = 0};
  });
  memo_.reset_low_water();
}

// split_threads() threads, the first at `first` of what is left, the others evenly after it.
void PickleVm::start_split_threads(double first, const std::function<SplitStart(double)>& start_at) {
  const std::size_t threads = split_threads();
  splits_.resize(threads);
  for (std::size_t k = threads; k-- > 0;) {  // the last first: each names the one after it
    const double at = first + (1 - first) * static_cast<double>(k) / static_cast<double>(threads);
    const TraceSplitter* next = k + 1 < threads ? splits_[k + 1].get() : nullptr;
    splits_[k] = std::make_unique<TraceSplitter>(std::span(data_, size_), start_at(at), next, split_tuning_,
                                                 pager_.has_value(), *sink_);
  }
}

// A thread started with the read that has a start, or may still find one.
bool PickleVm::early_split_alive() const {
  for (std::size_t k = next_split_; k < splits_.size(); ++k) {
    if (!splits_[k]) continue;
    if (split_tuning_.wait) splits_[k]->wait_for_start();
    if (splits_[k]->start() != TraceSplitter::kNone) return true;
  }
  return false;
}

void PickleVm::stop_splits() {
  for (auto& split : splits_) {
    if (split) split->finish();
  }
  splits_.clear();
  next_split_ = 0;
}

// One thread a core beyond the reader's (the pager, the prefaulter and the event store's worker
// are light), at most kMaxSplitThreads; one on a single core when the tuning asks for it.
std::size_t PickleVm::split_threads() const {
  if (split_tuning_.threads > 0) return split_tuning_.threads;
  return std::clamp<std::size_t>(worker_count() - 1, 1, kMaxSplitThreads);
}

bool PickleVm::adopt_splits(const MarkInfo& mark) {
  while (next_split_ < splits_.size()) {
    TraceSplitter& split = *splits_[next_split_];
    if (split_tuning_.wait) split.wait_for_start();  // tests: what the thread takes does not depend on timing
    const std::size_t start = split.start();
    if (start == TraceSplitter::kPending || (start != TraceSplitter::kNone && op_pos_ < start)) return false;
    const bool adopted = adopt_split(split, mark);
    splits_[next_split_++].reset();  // its memory back; the threads before it have all ended
    if (adopted) return true;
  }
  return false;
}

bool PickleVm::adopt_split(TraceSplitter& split, const MarkInfo& mark) {
  if (op_pos_ != split.start()) return false;  // the reader is past it (or it found no start)
  {
    // The thread stops at its next batch end, and the reader decodes what it did not reach of its
    // part (a thread left without a core does not hold the reader up).
    const PhaseTimer timer("split: the reader waited for the thread's batch end");
    split.finish(!split_tuning_.wait);
  }
  if (mark.device < 0 || memo_.count() != split.base() || memo_.has_sparse() ||
      memo_.low_water() < split.copied() || !skimmed_strs_hold(split)) {
    return false;
  }
  const PhaseTimer adopt_timer("split: the reader adopted the thread's entries");
  const std::size_t usable = valid_split_checkpoints(split);
  if (usable == 0) return false;
  const SplitCheckpoint& at = split.checkpoints()[usable - 1];
  std::vector<Value> stacks;
  const std::function<const Value&(std::uint64_t)> slot = [this](std::uint64_t n) -> const Value& { return memo_[n]; };
  if (!sink_->adopt_split(static_cast<std::size_t>(mark.device), split.trace(), at.events, at.stacks, slot, doc_, stacks)) {
    return false;
  }
  append_split_memo(split, at, stacks);
  pos_ = at.pos;
  if (at.frame_end != 0) frame_end_ = at.frame_end;
  info_.streamed_entries += at.events;
  info_.split_entries += at.events;
  ++info_.split_parts;
  if (split.from_start()) ++info_.split_parts_from_start;
  released_any_ = true;
  return true;
}

// The strs a thread started with the read took from the skim are the reader's own.
bool PickleVm::skimmed_strs_hold(const TraceSplitter& split) const {
  for (const auto& [slot, v] : split.skimmed_strs()) {
    const Value* mine = memo_.find(slot);
    if (!mine || mine->kind != Kind::Str || mine->str() != v.str()) return false;
  }
  return true;
}

// How many of the thread's checkpoints the reader can adopt: up to the first event or memo slot
// the serial read would have taken otherwise. A slot the thread named by number must hold what
// the typed fast path accepts there (an action: a str; a frames value: a stack, a list, a tuple or
// None; a frame: a dict or an interned frame), and each memo slot the thread wrote a value the
// reader's memo can hold.
std::size_t PickleVm::valid_split_checkpoints(const TraceSplitter& split) const {
  const std::vector<SplitCheckpoint>& checkpoints = split.checkpoints();
  if (checkpoints.empty()) return 0;
  const SplitTrace& t = split.trace();
  const auto kind_of = [&](std::uint32_t ref) { return memo_[ref & SplitTrace::kIndex].kind; };
  std::size_t good_events = checkpoints.back().events;  // the events before the first one refused
  for (std::size_t a = 0; a < t.actions.size(); ++a) {
    if (is_split_slot(t.actions[a]) && memo_[t.actions[a].u].kind != Kind::Str) good_events = std::min(good_events, t.action_first[a]);
  }
  for (std::size_t k = 0; k < checkpoints.back().stacks; ++k) {
    bool ok = true;
    for (std::uint32_t f = t.stack_offsets[k]; ok && f < t.stack_offsets[k + 1]; ++f) {
      if (!SplitTrace::is_slot(t.stack_frames[f])) continue;
      const Kind frame = kind_of(t.stack_frames[f]);
      ok = frame == Kind::Dict || frame == Kind::Interned;
    }
    if (!ok) {
      good_events = std::min(good_events, t.stack_first[k]);
      break;  // later stacks come from later events
    }
  }
  for (const std::size_t i : t.reference_events) {
    if (i >= good_events) break;
    if (!SplitTrace::is_slot(t.events[i].stack)) continue;
    const Kind k = kind_of(t.events[i].stack);
    if (k != Kind::Interned && k != Kind::List && k != Kind::Tuple && k != Kind::None) {
      good_events = i;
      break;
    }
  }
  std::size_t usable = 0;
  while (usable < checkpoints.size() && checkpoints[usable].events <= good_events) ++usable;
  if (usable == 0) return 0;
  const Memo& written = split.memo();
  for (std::size_t j = split.base(); j < checkpoints[usable - 1].memo; ++j) {
    const Value& v = written.entry(written.slot_entry(j));
    if (!v.is_container() && !is_split_slot(v)) continue;
    while (usable > 0 && checkpoints[usable - 1].memo > j) --usable;
    break;
  }
  return usable;
}

// The thread's memo slots up to `at`, appended to the reader's: each distinct value once, its
// local stacks as what the sink interned them to.
void PickleVm::append_split_memo(const TraceSplitter& split, const SplitCheckpoint& at, const std::vector<Value>& stacks) {
  const Memo& written = split.memo();
  std::vector<std::uint32_t> entry_of(written.value_entries(), UINT32_MAX);
  std::uint32_t chunk[4096];
  std::size_t n = 0;
  for (std::size_t j = split.base(); j < at.memo; ++j) {
    const std::uint32_t e = written.slot_entry(j);
    std::uint32_t& mine = entry_of[e];
    if (mine == UINT32_MAX) {
      const Value& v = written.entry(e);
      mine = memo_.entry_for(v.kind == Kind::Interned && v.aux == kSplitStackTag ? stacks[v.u] : v);
    }
    chunk[n++] = mine;
    if (n == std::size(chunk)) memo_.append_entries(chunk, n), n = 0;
  }
  memo_.append_entries(chunk, n);
}

}  // namespace memsnap::pickle_vm
