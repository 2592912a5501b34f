// The memo before the trace's second batch, from the opcodes alone (memo_skim.h).
#include "read/memo_skim.h"

#include <cstring>

#include "read/pickle_opcodes.h"
#include "read/split_start.h"

namespace memsnap::pickle_vm {

namespace {

constexpr char kTraceKey[] = "device_traces";
constexpr std::size_t kTraceKeyLength = sizeof kTraceKey - 1;

// The little-endian length field of `width` bytes at p (a str's, a long's), SIZE_MAX past the end.
std::size_t length_at(const std::uint8_t* d, std::size_t p, std::size_t width, std::size_t limit) {
  if (p + width > limit) return SIZE_MAX;
  std::uint64_t n = 0;
  std::memcpy(&n, d + p, width);
  return n > limit ? SIZE_MAX : static_cast<std::size_t>(n);
}

class Skim {
 public:
  Skim(const std::uint8_t* data, std::size_t limit, std::size_t size, const std::atomic<bool>& stop)
      : d_(data), limit_(limit), size_(size), stop_(stop) {}

  std::optional<MemoSkim> run() {
    if (limit_ < 2 || d_[0] != op::kProto || d_[1] < 4) return std::nullopt;
    std::size_t p = 2, check = 0;
    while (p < limit_) {
      if (p >= check) {
        if (stop_.load(std::memory_order_relaxed) || out_.strs.size() > kMaxSkimmedStrs) return std::nullopt;
        check = p + (std::size_t(1) << 20);
      }
      if (p >= end_) {
        if (p != end_) return std::nullopt;  // the batch start was not at an opcode
        out_.end = p;
        return std::move(out_);
      }
      if (!step(p)) return std::nullopt;
    }
    return std::nullopt;
  }

 private:
  // One opcode (a run of memo references at once, as the segments' frames lists are); false
  // where the walk cannot follow.
  bool step(std::size_t& p) {
    const std::uint8_t op = d_[p];
    switch (op) {
      case op::kBinGet: case op::kLongBinGet:
        while (p < limit_ && (d_[p] == op::kBinGet || d_[p] == op::kLongBinGet)) p += d_[p] == op::kBinGet ? 2 : 5;
        str_ = false;
        return true;
      case op::kMemoize:
        if (str_) {
          out_.strs.emplace_back(out_.puts, Value::string(reinterpret_cast<const char*>(d_ + str_at_), str_length_));
        }
        ++out_.puts;
        str_ = false;
        ++p;
        return true;
      case op::kFrame: p += 9; return true;  // between a str and its MEMOIZE too
      case op::kShortBinUnicode: return str(p, 1);
      case op::kBinUnicode: return str(p, 4);
      case op::kBinUnicode8: return str(p, 8);
      case op::kShortBinBytes: case op::kShortBinString: return skip_sized(p, 1);
      case op::kBinBytes: case op::kBinString: return skip_sized(p, 4);
      case op::kBinBytes8: case op::kByteArray8: return skip_sized(p, 8);
      case op::kLong1: return skip_sized(p, 1);
      case op::kLong4: return skip_sized(p, 4);
      case op::kBinInt1: return skip(p, 2);
      case op::kBinInt2: return skip(p, 3);
      case op::kBinInt: return skip(p, 5);
      case op::kBinFloat: return skip(p, 9);
      case op::kMark: case op::kEmptyDict: case op::kEmptyList: case op::kEmptyTuple: case op::kEmptySet:
      case op::kNone: case op::kNewTrue: case op::kNewFalse: case op::kAppend: case op::kAppends:
      case op::kSetItem: case op::kSetItems: case op::kDict: case op::kList: case op::kTuple:
      case op::kTuple1: case op::kTuple2: case op::kTuple3: case op::kAddItems: case op::kFrozenSet:
      case op::kPop: case op::kPopMark: case op::kDup:
        return skip(p, 1);
      default: return false;  // BINPUT (a slot by number), STOP before the trace, anything not plain data
    }
  }
  bool skip(std::size_t& p, std::size_t n) {
    str_ = false;
    p += n;
    return p <= limit_;
  }
  bool skip_sized(std::size_t& p, std::size_t width) {
    const std::size_t n = length_at(d_, p + 1, width, limit_);
    return n != SIZE_MAX && skip(p, 1 + width + n);
  }
  bool str(std::size_t& p, std::size_t width) {
    const std::size_t n = length_at(d_, p + 1, width, limit_);
    if (n == SIZE_MAX || p + 1 + width + n > limit_ || n > UINT32_MAX) return false;
    const std::size_t at = p + 1 + width;
    if (end_ == SIZE_MAX && n == kTraceKeyLength && std::memcmp(d_ + at, kTraceKey, n) == 0) {
      const auto batch = find_batch_start(d_, size_, at + n);
      if (!batch) return false;
      out_.trace = p;
      end_ = *batch;
    }
    str_ = true;
    str_at_ = at;
    str_length_ = static_cast<std::uint32_t>(n);
    p = at + n;
    return true;
  }

  const std::uint8_t* d_;
  std::size_t limit_, size_;
  const std::atomic<bool>& stop_;
  std::size_t end_ = SIZE_MAX;
  bool str_ = false;  // the last opcode pushed a str (at str_at_, str_length_ bytes)
  std::size_t str_at_ = 0;
  std::uint32_t str_length_ = 0;
  MemoSkim out_;
};

}  // namespace

std::optional<MemoSkim> skim_memo_to_trace(const std::uint8_t* data, std::size_t size, std::size_t max_bytes,
                                           const std::atomic<bool>& stop) {
  return Skim(data, std::min(size, max_bytes), size, stop).run();
}

}  // namespace memsnap::pickle_vm
