// Where a trace split thread starts (a batch of entries after a given offset) and the
// memo size the reader will have there, learned from the entries that follow (split_start.h).
#include "read/split_start.h"

#include <absl/container/flat_hash_map.h>

#include <cstring>
#include <string_view>

namespace memsnap::pickle_vm {

namespace {

// ---- learning the memo size at the start ----

constexpr std::size_t kLearnEntries = 50'000;
constexpr std::size_t kLearnVotes = 8;
constexpr std::size_t kFindStartBytes = std::size_t(4) << 20;

// A walk over trace entries that decodes only what the learning needs: the action's text, the
// address, and the frames list's memo slot (relative to the start when the list is new there).
class EntryWalk {
 public:
  EntryWalk(const std::uint8_t* data, std::size_t size, std::size_t pos, const Memo& memo, TraceEntrySink& sink)
      : d_(data), size_(size), p_(pos), memo_(memo), sink_(sink) {}

  struct Entry {
    std::string_view action;
    std::uint64_t addr = 0;
    bool new_list = false;      // frames: a list memoized `list` puts after the start
    bool list_ref = false;      // frames: a reference to slot `list`
    std::uint64_t list = 0;
  };
  // The next entry; false at anything else (the walk ends).
  bool next(Entry& e) {
    e = Entry{};
    skip_frames();
    if (at(op::kAppends)) {  // a batch ends: the next one must follow
      ++p_;
      skip_frames();
      if (!at(op::kMark)) return false;
      ++p_;
      skip_frames();
    }
    if (!at(op::kEmptyDict)) return false;
    ++p_;
    if (!memoize() || !take(op::kMark)) return false;
    for (;;) {
      skip_frames();
      if (at(op::kSetItems)) {
        ++p_;
        return true;
      }
      std::uint64_t key;
      if (!ref(key) || key >= memo_.size() || memo_[key].kind != Kind::Str) return false;
      const TraceField field = sink_.trace_field(memo_[key].str());
      if (!value(field, e)) return false;
    }
  }
  std::size_t puts() const { return puts_; }
  std::size_t pos() const { return p_; }

 private:
  bool at(std::uint8_t op) const { return p_ < size_ && d_[p_] == op; }
  bool take(std::uint8_t op) {
    skip_frames();
    if (!at(op)) return false;
    ++p_;
    return true;
  }
  void skip_frames() {
    while (p_ + 9 <= size_ && d_[p_] == op::kFrame) p_ += 9;
  }
  bool memoize() {
    if (!take(op::kMemoize)) return false;
    ++puts_;
    return true;
  }
  bool ref(std::uint64_t& index) {
    skip_frames();
    if (p_ + 2 <= size_ && d_[p_] == op::kBinGet) {
      index = d_[p_ + 1];
      p_ += 2;
      return true;
    }
    if (p_ + 5 <= size_ && d_[p_] == op::kLongBinGet) {
      std::uint32_t u;
      std::memcpy(&u, d_ + p_ + 1, 4);
      index = u;
      p_ += 5;
      return true;
    }
    return false;
  }
  // One scalar, str, reference, 2-tuple or list (of such values); what the entry needs of it.
  bool value(TraceField field, Entry& e, int depth = 0) {
    skip_frames();
    if (p_ + 10 > size_ || depth > 2) return false;
    const std::uint8_t op = d_[p_];
    std::uint64_t index;
    switch (op) {
      case op::kBinInt1: e.addr = field == TraceField::Addr ? d_[p_ + 1] : e.addr; p_ += 2; return maybe_tuple();
      case op::kBinInt2: p_ += 3; return maybe_tuple();
      case op::kBinInt: p_ += 5; return maybe_tuple();
      case op::kLong1: {
        const std::size_t n = d_[p_ + 1];
        if (n > 8 || p_ + 2 + n > size_) return false;
        std::uint64_t v = 0;
        for (std::size_t k = 0; k < n; ++k) v |= std::uint64_t(d_[p_ + 2 + k]) << (8 * k);
        if (field == TraceField::Addr) e.addr = v;
        p_ += 2 + n;
        return maybe_tuple();
      }
      case op::kNone: case op::kNewTrue: case op::kNewFalse: case op::kEmptyTuple: ++p_; return true;
      case op::kShortBinUnicode: {
        const std::size_t n = d_[p_ + 1];
        if (p_ + 2 + n > size_) return false;
        if (field == TraceField::Action) e.action = {reinterpret_cast<const char*>(d_ + p_ + 2), n};
        p_ += 2 + n;
        skip_frames();
        if (at(op::kMemoize)) ++p_, ++puts_;
        return true;
      }
      case op::kBinGet: case op::kLongBinGet:
        if (!ref(index)) return false;
        if (field == TraceField::Action && index < memo_.size() && memo_[index].kind == Kind::Str) e.action = memo_[index].str();
        if (field == TraceField::Frames) e.list_ref = true, e.list = index;
        return true;
      case op::kEmptyList: {
        ++p_;
        skip_frames();
        if (at(op::kMemoize)) {
          if (field == TraceField::Frames) e.new_list = true, e.list = puts_;
          ++p_, ++puts_;
        }
        skip_frames();
        if (at(op::kMark)) {
          ++p_;
          for (;;) {
            skip_frames();
            if (at(op::kAppends)) return ++p_, true;
            Entry ignored;
            if (!value(TraceField::Ignored, ignored, depth + 1)) return false;
          }
        }
        if (at(op::kBinGet) || at(op::kLongBinGet)) {
          if (!ref(index)) return false;
          return take(op::kAppend);
        }
        return true;
      }
      default: return false;
    }
  }
  // A scalar may be the first of a pool-id 2-tuple.
  bool maybe_tuple() {
    skip_frames();
    if (p_ >= size_) return false;
    const std::uint8_t op = d_[p_];
    if (op != op::kBinInt1 && op != op::kBinInt2 && op != op::kBinInt && op != op::kLong1) return true;
    Entry ignored;
    if (!value(TraceField::Ignored, ignored, 2) || !take(op::kTuple2)) return false;
    skip_frames();
    if (at(op::kMemoize)) ++p_, ++puts_;
    return true;
  }

  const std::uint8_t* d_;
  std::size_t size_;
  std::size_t p_;
  const Memo& memo_;
  TraceEntrySink& sink_;
  std::size_t puts_ = 0;
};

}  // namespace

// The memo size the reader will have at `start` (a batch MARK): an entry whose frames list is new
// there (memoized j puts after `start`) and a later entry of the same address naming a list by
// slot n (PyTorch's frees name their alloc's list) say n - j. The most frequent answer in the
// first kLearnEntries entries, when at least kLearnVotes entries give it and nine in ten agree.
std::optional<MemoBase> learn_memo_base(const std::uint8_t* data, std::size_t size, std::size_t start, const Memo& memo,
                                        TraceEntrySink& sink) {
  EntryWalk walk(data, size, start + 1, memo, sink);
  absl::flat_hash_map<std::uint64_t, std::uint64_t> new_lists;  // address -> its latest new list, in puts
  absl::flat_hash_map<std::size_t, std::size_t> votes;
  std::size_t voted = 0, n = 0;
  EntryWalk::Entry e;
  for (; n < kLearnEntries && walk.next(e); ++n) {
    if (e.new_list) new_lists[e.addr] = e.list;
    if (!e.list_ref || e.list < memo.size()) continue;
    const auto it = new_lists.find(e.addr);
    if (it == new_lists.end() || e.list < memo.size() + it->second) continue;
    ++votes[e.list - it->second];
    if (++voted == 4 * kLearnVotes) break;
  }
  std::size_t best = 0, most = 0;
  for (const auto& [base, count] : votes) {
    if (count > most) best = base, most = count;
  }
  if (most < kLearnVotes || 10 * most < 9 * voted) return std::nullopt;
  return MemoBase{.base = best, .entry_bytes = (walk.pos() - start) / n};
}

// A batch start at or after `from`: APPENDS [FRAME] MARK EMPTY_DICT MEMOIZE MARK; the MARK's offset.
std::optional<std::size_t> find_batch_start(const std::uint8_t* data, std::size_t size, std::size_t from) {
  static constexpr std::uint8_t kPattern[] = {op::kMark, op::kEmptyDict, op::kMemoize, op::kMark};
  const std::size_t end = std::min(size, from + kFindStartBytes);
  for (std::size_t p = std::max<std::size_t>(from, 10); p + sizeof kPattern <= end; ++p) {
    const void* hit = memchr(data + p, op::kMark, end - p);
    if (!hit) return std::nullopt;
    p = static_cast<std::size_t>(static_cast<const std::uint8_t*>(hit) - data);
    if (p + sizeof kPattern > end || std::memcmp(data + p, kPattern, sizeof kPattern) != 0) continue;
    if (data[p - 1] == op::kAppends || (data[p - 9] == op::kFrame && data[p - 10] == op::kAppends)) return p;
  }
  return std::nullopt;
}

}  // namespace memsnap::pickle_vm
