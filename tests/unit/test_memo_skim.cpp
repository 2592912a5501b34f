// The memo skim (read/memo_skim.h): a walk over the opcodes before the trace's second batch
// counts the memo puts the reader will have made there and notes where each memoized str went;
// it gives up on anything it cannot count exactly.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "pickle_writer.h"
#include "read/memo_skim.h"

namespace memsnap {
namespace {

using pickle_vm::MemoSkim;
using pickle_vm::skim_memo_to_trace;

// A snapshot as PyTorch's pickler writes one: a block with a str key and a frames list in the
// segments, then device_traces with two batches of entries (the first memoizes the trace's keys
// and actions, later ones name them by slot). Each memo put is counted as it is written.
struct Written {
  test::PickleWriter w;
  std::size_t puts = 0;
  std::size_t segments_key = 0, size_key = 0, action_key = 0, alloc = 0, trace_key = 0;
  std::size_t second_batch = 0;  // the MARK where the second batch begins
  std::size_t puts_there = 0;

  std::size_t memo() {
    w.memoize();
    return puts++;
  }
  void entry(bool first) {
    w.dict();
    memo();
    w.mark();
    if (first) {
      w.str("action");
      action_key = memo();
      w.str("alloc");
      alloc = memo();
    } else {
      w.long_binget(static_cast<std::uint32_t>(action_key)).long_binget(static_cast<std::uint32_t>(alloc));
    }
    w.long_binget(static_cast<std::uint32_t>(size_key)).integer(1 << 20);
    w.setitems();
  }
  explicit Written(bool binput = false, std::size_t first_batch = 1000) {
    w.dict();
    memo();
    w.mark();
    w.str("segments");
    segments_key = memo();
    w.list();
    memo();
    w.mark().dict();
    memo();
    w.mark();
    w.str("size");
    size_key = memo();
    w.integer(1 << 21);
    w.binunicode("frames");
    memo();
    w.list();
    memo();
    w.op(0x8a).u8(3).le(0x123456, 3);  // a LONG1 where a frame would be
    if (binput) w.binput(7);
    w.setitems().appends();
    w.str("device_traces");
    trace_key = memo();
    w.list();
    memo();
    w.mark().list();
    memo();
    w.mark();
    for (std::size_t k = 0; k < first_batch; ++k) entry(k == 0);
    w.appends();
    second_batch = w.bytes().size();
    puts_there = puts;
    w.mark();
    for (int k = 0; k < 3; ++k) entry(false);
    w.appends().appends().setitems().stop();
  }
};

std::optional<MemoSkim> skim(const std::vector<std::uint8_t>& bytes) {
  const std::atomic<bool> stop{false};
  return skim_memo_to_trace(bytes.data(), bytes.size(), bytes.size(), stop);
}

std::string str_at(const MemoSkim& s, std::size_t slot) {
  for (const auto& [k, v] : s.strs) {
    if (k == slot) return std::string(v.str());
  }
  return "(none)";
}

TEST(MemoSkim, CountsThePutsBeforeTheTracesSecondBatchAndWhereEachStrWent) {
  const Written written;
  const auto s = skim(written.w.bytes());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->end, written.second_batch);
  EXPECT_EQ(s->puts, written.puts_there);
  EXPECT_EQ(str_at(*s, written.segments_key), "segments");
  EXPECT_EQ(str_at(*s, written.size_key), "size");
  EXPECT_EQ(str_at(*s, written.size_key + 1), "frames");  // BINUNICODE
  EXPECT_EQ(str_at(*s, written.trace_key), "device_traces");
  EXPECT_EQ(str_at(*s, written.action_key), "action");
  EXPECT_EQ(str_at(*s, written.alloc), "alloc");
  EXPECT_EQ(s->strs.size(), 6u);  // the six above, nothing else
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(written.w.bytes().data() + s->trace + 2), 13), "device_traces");
}

TEST(MemoSkim, GivesUpWhereItCannotCountExactly) {
  // A memo put by number (BINPUT) in the segments.
  EXPECT_FALSE(skim(Written(true).w.bytes()).has_value());
  // No trace at all, and a pickle cut short.
  test::PickleWriter no_trace;
  no_trace.dict().memoize().mark().str("segments").memoize().list().memoize().setitems().stop();
  EXPECT_FALSE(skim(no_trace.bytes()).has_value());
  std::vector<std::uint8_t> cut = Written().w.bytes();
  cut.resize(cut.size() / 2);
  EXPECT_FALSE(skim(cut).has_value());
  // An opcode that is not plain data (GLOBAL) before the trace.
  std::vector<std::uint8_t> global = Written().w.bytes();
  global[3] = 'c';
  EXPECT_FALSE(skim(global).has_value());
  // Told to stop.
  const std::atomic<bool> stop{true};
  const std::vector<std::uint8_t> bytes = Written().w.bytes();
  EXPECT_FALSE(skim_memo_to_trace(bytes.data(), bytes.size(), bytes.size(), stop).has_value());
}

}  // namespace
}  // namespace memsnap
