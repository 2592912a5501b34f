// The reader's frames-list loop (pickle_fast_path.cpp): long lists that outgrow its id buffer,
// frame dicts met for the first time in the middle of a list, BINGET and LONG_BINGET mixed, and
// stack ids given in order of first occurrence whatever the stacks hash to; and lists of memo
// references outside the trace (blocks' frames) built in one step exactly as the generic path
// builds them (a second APPENDS batch, a reference to the list itself, a bad reference's error),
// equal ones sharing their items until one of them is appended to (found by their bytes while
// the memo is unchanged); the stacks of the trace's lists found from their bytes; and the memo's
// shared values.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "pickle_writer.h"
#include "read/pickle_reader.h"
#include "read/pickle_vm.h"
#include "test_support.h"

namespace memsnap {
namespace frames_lists_tests {

using test::PickleWriter;

// A snapshot whose device_traces[0] holds one alloc entry per frames list in `lists`, written the
// way PyTorch's pickler writes them (keys and the action memoized once, then memo references), so
// the typed fast path takes them. Each list names frame dicts by number (frame k is the dict
// {"filename": "/w/fk.py", "name": "f", "line": k}), all memoized before the trace and none
// converted before the first list that names it: the loop meets each one mid-list the first time.
// With `rewrite_before` = i, the batch is closed before entry i, frame 1's memo slot is overwritten
// (LONG_BINPUT) with the dict of line 99, and a new batch begins. Protocol 3 (no FRAME opcodes)
// reads as the inside of one pickle frame, where the frames-list loop runs; protocol 4 without a
// FRAME opcode takes the path that checks for one before every opcode. With `same_list_as`
// {i: j}, entry i's frames is a memo reference to entry j's list instead of a list (lists[i] unused).
std::vector<std::uint8_t> snapshot_with_lists(const std::vector<std::vector<int>>& lists,
                                              std::size_t rewrite_before = SIZE_MAX, int protocol = 3,
                                              const std::map<std::size_t, std::size_t>& same_list_as = {}) {
  PickleWriter w(protocol);
  std::uint32_t memo = 0;
  std::map<std::string, std::uint32_t> slots;
  auto shared_str = [&](const std::string& s) {  // memoized the first time, referenced after
    if (auto it = slots.find(s); it != slots.end()) return void(w.long_binget(it->second));
    w.str(s).memoize();
    slots[s] = memo++;
  };
  auto frame = [&](int k) {
    w.dict().memoize().mark().str("filename").str("/w/f" + std::to_string(k) + ".py").str("name").str("f");
    w.str("line").integer(k).setitems();
    return memo++;
  };
  w.dict().memoize().mark();  // memo 0: the root
  ++memo;
  w.str("segments").list().memoize();
  ++memo;
  std::vector<std::uint32_t> slot;
  w.mark();
  for (int k = 0; k < 4; ++k) slot.push_back(frame(k));
  w.op('1');  // POP_MARK: the frame dicts are only memoized
  w.str("device_traces").list().list().mark();
  std::map<std::size_t, std::uint32_t> list_slot;  // entry -> its frames list's memo slot
  for (std::size_t i = 0; i < lists.size(); ++i) {
    if (i == rewrite_before) {
      w.appends();
      w.dict().mark().str("filename").str("/w/f99.py").str("name").str("g").str("line").integer(99).setitems();
      w.long_binput(slot[1]).op('0');  // POP
      w.mark();
    }
    w.dict().memoize();
    ++memo;
    w.mark();
    shared_str("action");
    shared_str("alloc");
    shared_str("addr");
    w.integer(4096 + 512 * static_cast<std::int64_t>(i));
    shared_str("size");
    w.integer(512);
    shared_str("stream");
    w.integer(0);
    shared_str("time_us");
    w.integer(static_cast<std::int64_t>(i));
    shared_str("frames");
    if (const auto it = same_list_as.find(i); it != same_list_as.end()) {
      w.long_binget(list_slot.at(it->second)).setitems();
      continue;
    }
    w.list().memoize().mark();
    list_slot[i] = memo++;
    for (std::size_t r = 0; r < lists[i].size(); ++r) {
      const std::uint32_t s = slot[static_cast<std::size_t>(lists[i][r])];
      if (r % 3 == 0) w.binget(static_cast<std::uint8_t>(s));
      else w.long_binget(s);
    }
    w.appends().setitems();
  }
  w.appends().append().setitems().stop();
  return w.bytes();
}

std::vector<int> lines_of(const Snapshot& snap, StackId stack) {
  std::vector<int> lines;
  for (const FrameId* f = snap.stack_begin(stack); f != snap.stack_begin(stack) + snap.stack_size(stack); ++f) lines.push_back(static_cast<int>(snap.frames[*f].line));
  return lines;
}

TEST(FramesLists, ALongListOutgrowsTheBufferAndKeepsEveryFrameInOrder) {
  std::vector<int> big;
  for (int r = 0; r < 1500; ++r) big.push_back(r == 700 ? 3 : r % 3);  // frame 3 first named at reference 700
  const std::vector<int> small = {2, 1, 0};
  const auto loaded = test::load_bytes(snapshot_with_lists({big, small, big, small}));
  const Snapshot& snap = loaded.snapshot;
  const auto& events = snap.device_traces.at(0).events;
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(lines_of(snap, events[0].stack), big);
  EXPECT_EQ(lines_of(snap, events[1].stack), small);
  EXPECT_EQ(events[2].stack, events[0].stack);  // an equal list, written again: the same stack
  EXPECT_EQ(events[3].stack, events[1].stack);
  EXPECT_EQ(snap.stack_count(), 3u);  // stack 0 is the empty stack
}

TEST(FramesLists, StacksAreNumberedInTheOrderTheyFirstOccur) {
  // 600 distinct lists (every sequence of four frames from 0-2 and the next two digits), each written twice.
  std::vector<std::vector<int>> lists;
  for (int i = 0; i < 600; ++i) lists.push_back({i % 3, (i / 3) % 3, (i / 9) % 3, (i / 27) % 3, (i / 81) % 3, (i / 243) % 3});
  std::vector<std::vector<int>> twice = lists;
  twice.insert(twice.end(), lists.begin(), lists.end());
  const auto loaded = test::load_bytes(snapshot_with_lists(twice));
  const Snapshot& snap = loaded.snapshot;
  const auto& events = snap.device_traces.at(0).events;
  ASSERT_EQ(events.size(), 1200u);
  // 3^6 = 729 > 600: all 600 sequences differ, so stack i + 1 is the i-th list (0 is the empty stack).
  ASSERT_EQ(snap.stack_count(), 601u);
  for (std::size_t i = 0; i < 600; ++i) {
    ASSERT_EQ(events[i].stack, static_cast<StackId>(i + 1)) << i;
    ASSERT_EQ(events[600 + i].stack, static_cast<StackId>(i + 1)) << i;
    ASSERT_EQ(lines_of(snap, events[i].stack), lists[i]) << i;
  }
}

// The reader finds the stack of a frames list equal byte for byte to an earlier one from its bytes
// (FramesListCache); a memo slot the list names, overwritten in between, makes it decode again.
TEST(FramesLists, AnEqualListAfterItsFrameSlotWasOverwrittenNamesTheNewFrame) {
  const std::vector<int> list = {0, 1, 2, 1};
  for (const int protocol : {3, 4}) {
    const auto loaded = test::load_bytes(snapshot_with_lists({list, list, list, list}, 2, protocol));
    const Snapshot& snap = loaded.snapshot;
    const auto& events = snap.device_traces.at(0).events;
    ASSERT_EQ(events.size(), 4u);
    EXPECT_EQ(lines_of(snap, events[0].stack), list) << protocol;
    EXPECT_EQ(events[1].stack, events[0].stack) << protocol;
    EXPECT_EQ(lines_of(snap, events[2].stack), (std::vector<int>{0, 99, 2, 99})) << protocol;
    EXPECT_EQ(events[3].stack, events[2].stack) << protocol;
  }
}

// A list found from its bytes is memoized as its stack (the memo entry that held it the first
// time, FramesListCache's CachedStack): a later entry that names that list's memo slot, or an
// equal list's, gets the same stack, before and after a frame's slot is overwritten.
TEST(FramesLists, AMemoReferenceToAListFoundFromItsBytesNamesItsStack) {
  const std::vector<int> a = {0, 1, 2}, b = {2, 2, 3, 0};
  const std::vector<std::vector<int>> lists = {a, b, a, b, a, {}, {}, {}, a, {}, {}};
  // Entry 4 is the third equal list a (found from its bytes), 3 the second b; after the rewrite
  // before entry 8, list a names frame 99 in its second place.
  const std::map<std::size_t, std::size_t> refs = {{5, 4}, {6, 3}, {7, 2}, {9, 8}, {10, 4}};
  for (const int protocol : {3, 4}) {
    const auto loaded = test::load_bytes(snapshot_with_lists(lists, 8, protocol, refs));
    const Snapshot& snap = loaded.snapshot;
    const auto& events = snap.device_traces.at(0).events;
    ASSERT_EQ(events.size(), lists.size());
    for (const std::size_t i : {2, 4, 5, 7, 10}) {
      EXPECT_EQ(lines_of(snap, events[i].stack), a) << protocol << " " << i;
    }
    EXPECT_EQ(lines_of(snap, events[6].stack), b) << protocol;
    EXPECT_EQ(lines_of(snap, events[8].stack), (std::vector<int>{0, 99, 2})) << protocol;
    EXPECT_EQ(events[9].stack, events[8].stack) << protocol;
  }
}

TEST(FramesLists, AReferenceRunEndsAtTheFirstOtherOpcodeOrWhereItsBytesRunOut) {
  auto memo_reference_run_end = [](const std::uint8_t* d, const std::uint8_t* end) { return pickle_vm::memo_reference_run(d, end).end; };
  PickleWriter w;
  for (int k = 0; k < 9; ++k) w.long_binget(300 + k);  // two steps of four, then one
  for (int k = 0; k < 5; ++k) w.binget(static_cast<std::uint8_t>(k));
  w.long_binget(7).binget(1).appends();
  const std::vector<std::uint8_t>& b = w.bytes();
  const std::uint8_t* begin = b.data() + 2;  // past PROTO
  const std::uint8_t* appends = b.data() + b.size() - 1;
  EXPECT_EQ(memo_reference_run_end(begin, b.data() + b.size()), appends);
  EXPECT_EQ(*appends, 'e');
  // A LONG_BINGET whose index is cut off by the end is not part of the run.
  const std::uint8_t* eighth = begin + 7 * 5;
  EXPECT_EQ(memo_reference_run_end(begin, eighth + 4), eighth);
  EXPECT_EQ(memo_reference_run_end(begin, begin), begin);
}

// A trace entry's frames list that names itself (its memo slot is written only once the list is
// decoded) is refused by the fast path and reported by the generic one.
TEST(FramesLists, AFramesListThatNamesItselfIsReported) {
  PickleWriter w(3);
  w.dict().binput(0).mark().str("segments").list().binput(1).str("device_traces").list().binput(2);
  w.list().binput(3).mark().dict().binput(4).mark();
  w.str("action").str("alloc").str("addr").integer(1).str("size").integer(512).str("stream").integer(0);
  w.str("frames").list().binput(5).mark().binget(5).appends();
  w.setitems().appends().append().setitems().stop();
  EXPECT_EQ(test::load_error(w.bytes()),
            "a stack frame is a list, expected a dict with filename, name and line; " + std::string(kRecaptureRemedy));
}

// A list's bytes find what they were remembered with, and bytes that differ in any one position
// (at every length, short lists compared word by word, long ones by memcmp) or in length do not,
// even under the same hash.
TEST(FramesLists, TheBytesCacheTellsListsApartByEveryByte) {
  for (std::size_t length = 1; length <= 150; ++length) {
    std::vector<std::uint8_t> body(length + 1);
    for (std::size_t k = 0; k < body.size(); ++k) body[k] = static_cast<std::uint8_t>(k * 7 + length);
    pickle_vm::ListBytesCache<int> cache;
    const std::uint64_t h = 12345;
    cache.insert(body.data(), length, h, 42);
    const int* found = cache.find(body.data(), length, h);
    ASSERT_TRUE(found && *found == 42) << length;
    EXPECT_EQ(cache.find(body.data(), length + 1, h), nullptr) << length;
    EXPECT_EQ(cache.find(body.data(), length, h + 1), nullptr) << length;
    for (std::size_t k = 0; k < length; ++k) {
      std::vector<std::uint8_t> other = body;
      other[k] ^= 0x10;
      EXPECT_EQ(cache.find(other.data(), length, h), nullptr) << length << " " << k;
    }
  }
}

// A short list is found from its first eight bytes (no walk, no hash) only when its bytes equal
// the list last remembered or found with them and an APPENDS follows them inside the limit; a
// longer list with the same start, a byte changed, an end at the limit, a long list or an
// emptied cache find nothing.
TEST(FramesLists, AShortListIsFoundByItsFirstBytesOnlyWhenItsBytesAndItsEndAgree) {
  using Bytes = std::vector<std::uint8_t>;
  const Bytes a = {op::kBinGet, 1, op::kBinGet, 2, op::kBinGet, 3, op::kBinGet, 4, op::kBinGet, 5, op::kAppends, op::kSetItems};
  const std::size_t length = 10;
  using Cache = pickle_vm::ListBytesCache<int, true>;
  auto found = [](Cache& cache, const Bytes& b, std::size_t limit, std::size_t& n) {
    return cache.find_short(b.data(), b.data() + limit, n);
  };
  Cache cache;
  cache.insert(a.data(), length, 7, 42, a.data() + a.size());
  std::size_t n = 0;
  const int* v = found(cache, a, a.size(), n);
  ASSERT_TRUE(v && *v == 42);
  EXPECT_EQ(n, length);
  Bytes longer = a;
  longer.insert(longer.begin() + 10, {op::kBinGet, 6});
  EXPECT_EQ(found(cache, longer, longer.size(), n), nullptr);
  for (std::size_t k = 8; k < length; ++k) {  // past the eight bytes the slot is chosen by
    Bytes other = a;
    other[k] ^= 0x10;
    EXPECT_EQ(found(cache, other, other.size(), n), nullptr) << k;
  }
  EXPECT_EQ(found(cache, a, length, n), nullptr);  // the APPENDS is not readable
  EXPECT_NE(found(cache, a, length + 1, n), nullptr);
  // The same first eight bytes, found by hash: now the list find_short tries.
  Bytes b = a;
  b[9] = 9;
  cache.insert(b.data(), length, 8, 43, b.data() + b.size());
  v = found(cache, b, b.size(), n);
  ASSERT_TRUE(v && *v == 43);
  EXPECT_EQ(found(cache, a, a.size(), n), nullptr);
  ASSERT_NE(cache.find(a.data(), length, 7, a.data() + a.size()), nullptr);
  v = found(cache, a, a.size(), n);
  ASSERT_TRUE(v && *v == 42);
  // A list longer than kShort is only found by hash.
  Bytes big;
  for (std::uint8_t k = 0; k < 40; ++k) big.insert(big.end(), {op::kBinGet, k});
  big.push_back(op::kAppends);
  Cache other;
  other.insert(big.data(), big.size() - 1, 9, 44, big.data() + big.size());
  EXPECT_EQ(found(other, big, big.size(), n), nullptr);
  EXPECT_NE(other.find(big.data(), big.size() - 1, 9), nullptr);
  cache.keep_for(1);
  EXPECT_EQ(found(cache, a, a.size(), n), nullptr);
}

// A trace repeats its sequence of stacks each step: the list that followed the one found last,
// the last time, is tried first (no walk, no hash), long lists included. It is found only when
// its bytes equal body's and an APPENDS follows them inside the limit; a list not in the cache
// between two (a hash taken by another) breaks the chain, and so does an emptied cache.
TEST(FramesLists, TheListThatFollowedLastTimeIsFoundFirstOnlyWhenItsBytesAndItsEndAgree) {
  using Bytes = std::vector<std::uint8_t>;
  auto list = [](std::uint8_t first, std::size_t references) {
    Bytes b;
    for (std::size_t k = 0; k < references; ++k) {
      b.insert(b.end(), {op::kLongBinGet, static_cast<std::uint8_t>(first + k), 1, 0, 0});
    }
    b.insert(b.end(), {op::kAppends, op::kSetItems});
    return b;
  };
  const Bytes a = list(1, 3), b = list(1, 40), c = list(9, 2);  // b: 200 bytes, a's start
  using Cache = pickle_vm::ListBytesCache<int, true>;
  auto next = [](Cache& cache, const Bytes& l, std::size_t limit, std::size_t& n) {
    return cache.find_next(l.data(), l.data() + limit, n);
  };
  auto remember = [](Cache& cache, const Bytes& l, std::uint64_t h, int v) {
    cache.insert(l.data(), l.size() - 2, h, v, l.data() + l.size());
  };
  Cache cache;
  std::size_t n = 0;
  remember(cache, a, 1, 10);
  EXPECT_EQ(next(cache, b, b.size(), n), nullptr);  // a was never followed
  remember(cache, b, 2, 20);
  remember(cache, c, 3, 30);
  ASSERT_NE(cache.find(a.data(), a.size() - 2, 1, a.data() + a.size()), nullptr);
  const int* v = next(cache, b, b.size(), n);
  ASSERT_TRUE(v && *v == 20);
  EXPECT_EQ(n, b.size() - 2);
  v = next(cache, c, c.size(), n);  // and after b, c
  ASSERT_TRUE(v && *v == 30);
  EXPECT_EQ(n, c.size() - 2);
  // After a again: b is tried, and a list that differs from it in one byte, ends later or whose
  // APPENDS is not readable is not b.
  ASSERT_NE(cache.find(a.data(), a.size() - 2, 1, a.data() + a.size()), nullptr);
  for (std::size_t k = 0; k < b.size() - 2; ++k) {
    Bytes other = b;
    other[k] ^= 0x10;
    EXPECT_EQ(next(cache, other, other.size(), n), nullptr) << k;
  }
  Bytes longer = b;
  longer.insert(longer.end() - 2, {op::kBinGet, 6});
  EXPECT_EQ(next(cache, longer, longer.size(), n), nullptr);
  EXPECT_EQ(next(cache, b, b.size() - 2, n), nullptr);
  EXPECT_NE(next(cache, b, b.size() - 1, n), nullptr);
  // A list the cache could not keep (its hash is b's) comes between: nothing follows it, and
  // the link it broke is not made (b, found just before a, stays followed by a).
  const Bytes d = list(20, 2);
  ASSERT_NE(cache.find(a.data(), a.size() - 2, 1, a.data() + a.size()), nullptr);
  remember(cache, d, 2, 40);
  EXPECT_EQ(next(cache, c, c.size(), n), nullptr);
  ASSERT_NE(cache.find(b.data(), b.size() - 2, 2, b.data() + b.size()), nullptr);
  EXPECT_EQ(next(cache, c, c.size(), n), nullptr);
  v = next(cache, a, a.size(), n);
  ASSERT_TRUE(v && *v == 10);
  cache.keep_for(1);
  remember(cache, a, 1, 10);
  EXPECT_EQ(next(cache, b, b.size(), n), nullptr);
}

// The run's hash depends only on its bytes, and runs that differ in one reference, in length or
// in how a reference is written (BINGET 1 or LONG_BINGET 1) hash apart.
TEST(FramesLists, AReferenceRunIsHashedByItsBytes) {
  using pickle_vm::memo_reference_run;
  auto run_of = [](const std::function<void(PickleWriter&)>& refs) {
    PickleWriter w;
    refs(w);
    w.appends();
    std::vector<std::uint8_t> b(w.bytes().begin() + 2, w.bytes().end());  // past PROTO
    const auto run = memo_reference_run(b.data(), b.data() + b.size());
    EXPECT_EQ(static_cast<std::size_t>(run.end - b.data()), b.size() - 1);
    return run.hash;
  };
  auto longs = [](int n, int changed) {
    return [=](PickleWriter& w) {
      for (int k = 0; k < n; ++k) w.long_binget(static_cast<std::uint32_t>(1000 + k + (k == changed ? 1 : 0)));
    };
  };
  std::set<std::uint64_t> hashes;
  for (int n = 1; n <= 12; ++n) {
    EXPECT_EQ(run_of(longs(n, -1)), run_of(longs(n, -1)));
    hashes.insert(run_of(longs(n, -1)));
    for (int changed = 0; changed < n; ++changed) hashes.insert(run_of(longs(n, changed)));
  }
  EXPECT_EQ(hashes.size(), 12u + 78u);  // 12 lengths, and each of their 1 + ... + 12 variants
  EXPECT_NE(run_of([](PickleWriter& w) { w.binget(1).binget(2); }), run_of([](PickleWriter& w) { w.long_binget(1).binget(2); }));
  EXPECT_NE(run_of([](PickleWriter& w) { w.binget(1).binget(2).binget(3).binget(4); }),
            run_of([](PickleWriter& w) { w.binget(1).binget(2).binget(3).binget(5); }));
}

// memo 0 = 7, memo 1 = 8, memo 2 = the list: 1,000 references (one to the list itself) in one
// APPENDS, then 500 more in a second MARK ... APPENDS, as CPython batches a long list.
TEST(ReferenceLists, ABatchedListWithASelfReferenceIsBuiltAsTheGenericPathBuildsIt) {
  PickleWriter w;
  w.mark().integer(7).memoize().integer(8).memoize().op('1');  // POP_MARK: the ints are only memoized
  w.list().memoize().mark();
  std::vector<std::int64_t> want;
  for (int i = 0; i < 1000; ++i) {
    if (i == 500) {
      w.long_binget(2);
      want.push_back(-1);
      continue;
    }
    if (i % 2 == 0) w.binget(0);
    else w.long_binget(1);
    want.push_back(i % 2 == 0 ? 7 : 8);
  }
  w.appends().mark();
  for (int i = 0; i < 500; ++i) {
    w.long_binget(static_cast<std::uint32_t>(i % 2));
    want.push_back(i % 2 == 0 ? 7 : 8);
  }
  w.appends().stop();
  Document doc;
  read_pickle(w.bytes(), doc, nullptr);
  ASSERT_EQ(doc.root.kind, Kind::List);
  std::vector<std::int64_t> got;
  for (const Value& v : doc.items(doc.root)) {
    if (v.kind == Kind::List) {
      EXPECT_EQ(v.index, doc.root.index);  // the list itself
      got.push_back(-1);
    } else {
      got.push_back(v.i);
    }
  }
  EXPECT_EQ(got, want);
}

TEST(ReferenceLists, ABadReferenceIsReportedAtItsByte) {
  PickleWriter w;
  w.integer(7).memoize().list().memoize().mark().binget(0).long_binget(0);
  const std::size_t bad_at = w.bytes().size();
  w.binget(5).appends().stop();
  std::string error;
  try {
    Document doc;
    read_pickle(w.bytes(), doc, nullptr);
  } catch (const InputError& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "malformed pickle at byte " + std::to_string(bad_at) + ": memo entry 5 is read before it was written; " +
                       std::string(kRecaptureRemedy));
}

// memo 0 = 7, memo 1 = 8; the root list holds [7, 8], [7, 8] and [8, 7], each a list of memo
// references; `then` writes more opcodes before STOP. Protocol 3: no FRAME opcodes, so the
// one-step reference-list path takes the lists.
std::vector<std::uint8_t> three_reference_lists(const std::function<void(PickleWriter&)>& then) {
  PickleWriter w(3);
  w.mark().integer(7).memoize().integer(8).memoize().op('1');
  w.list().memoize().mark();                                  // memo 2: the root
  w.list().memoize().mark().binget(0).binget(1).appends();    // memo 3
  w.list().memoize().mark().binget(0).long_binget(1).appends();  // memo 4: equal to memo 3
  w.list().memoize().mark().binget(1).binget(0).appends();    // memo 5
  w.appends();
  then(w);
  w.stop();
  return w.bytes();
}

std::vector<std::int64_t> ints_of(const Document& doc, const Value& list) {
  std::vector<std::int64_t> out;
  for (const Value& v : doc.items(list)) out.push_back(v.i);
  return out;
}

TEST(ReferenceLists, AnEqualListSharesTheItemsOfTheFirst) {
  Document doc;
  read_pickle(three_reference_lists([](PickleWriter&) {}), doc, nullptr);
  std::vector<Value> lists;
  for (const Value& v : doc.items(doc.root)) lists.push_back(v);
  ASSERT_EQ(lists.size(), 3u);
  EXPECT_NE(lists[0].index, lists[1].index);  // two lists, as in the file
  EXPECT_EQ(ints_of(doc, lists[0]), (std::vector<std::int64_t>{7, 8}));
  EXPECT_EQ(ints_of(doc, lists[1]), (std::vector<std::int64_t>{7, 8}));
  EXPECT_EQ(ints_of(doc, lists[2]), (std::vector<std::int64_t>{8, 7}));
  EXPECT_EQ(doc.mark().items, 3u + 2u + 2u);  // the root's three, [7, 8] once, [8, 7]
}

TEST(ReferenceLists, AppendingToASharedListCopiesItFirst) {
  Document doc;
  // memo 4 (the second [7, 8]) gets a 9; the first keeps its two items.
  read_pickle(three_reference_lists([](PickleWriter& w) { w.binget(4).mark().integer(9).appends().op('0'); }), doc, nullptr);
  std::vector<Value> lists;
  for (const Value& v : doc.items(doc.root)) lists.push_back(v);
  ASSERT_EQ(lists.size(), 3u);
  EXPECT_EQ(ints_of(doc, lists[0]), (std::vector<std::int64_t>{7, 8}));
  EXPECT_EQ(ints_of(doc, lists[1]), (std::vector<std::int64_t>{7, 8, 9}));
  EXPECT_EQ(ints_of(doc, lists[2]), (std::vector<std::int64_t>{8, 7}));
}

// The lines of each block's stack, in segment order.
std::vector<std::vector<std::int64_t>> block_stack_lines(const Snapshot& s) {
  std::vector<std::vector<std::int64_t>> out;
  for (const Block& b : s.blocks) {
    std::vector<std::int64_t>& lines = out.emplace_back();
    if (b.stack == kNoStack) continue;
    for (std::size_t k = 0; k < s.stack_size(b.stack); ++k) lines.push_back(s.frames[s.stack_begin(b.stack)[k]].line);
  }
  return out;
}

// Blocks whose frames lists are byte for byte MARK BINGET 0 BINGET 1 APPENDS take the items of
// the first such list, unless a memo slot changed or that list was appended to since: frame k is
// the dict of line k in memo slot k; slot 1 is overwritten with frame 2's dict after the second
// block. Protocol 3: the one-step reference-list path takes every list.
TEST(ReferenceLists, AByteEqualListSharesItemsOnlyWhileTheMemoAndTheFirstListAreUnchanged) {
  PickleWriter w(3);
  w.mark();
  for (int k = 0; k < 3; ++k) {
    w.dict().memoize().mark().str("filename").str("/w/f" + std::to_string(k) + ".py").str("name").str("f");
    w.str("line").integer(k).setitems();
  }
  w.op('1');  // POP_MARK: memo 0-2 hold the frame dicts
  w.dict().mark().str("segments").list().mark();
  w.dict().mark().str("device").integer(0).str("address").integer(1 << 20).str("total_size").integer(4 * 512);
  w.str("blocks").list().mark();
  std::int64_t address = 1 << 20;
  auto block = [&](const std::function<void()>& after_list) {
    w.dict().mark().str("size").integer(512).str("state").str("active_allocated").str("address").integer(address);
    w.str("frames").list().mark().binget(0).binget(1).appends();
    after_list();
    w.setitems();
    address += 512;
  };
  block([] {});                          // 0, 1
  block([] {});                          // the first's items
  w.binget(2).binput(1).op('0');         // memo 1 := frame 2
  block([&] { w.binget(0).append(); });  // 0, 2, then appended to: 0, 2, 0
  block([] {});                          // 0, 2
  w.appends().setitems().appends().setitems().stop();
  const auto loaded = test::load_bytes(w.bytes());
  using Lines = std::vector<std::int64_t>;
  EXPECT_EQ(block_stack_lines(loaded.snapshot), (std::vector<Lines>{{0, 1}, {0, 1}, {0, 2, 0}, {0, 2}}));
}

// The memo holds one value entry per distinct converted value (a trace's frames lists name a few
// thousand stacks), and overwriting one slot leaves the slots that shared its entry unchanged.
TEST(Memo, EqualConvertedValuesShareOneEntry) {
  pickle_vm::Memo memo;
  for (int i = 0; i < 1000; ++i) memo.push_back(Value::interned(2, i % 3));
  EXPECT_EQ(memo.value_entries(), 1u + 3u);
  memo.set(4, Value::interned(2, 7));
  EXPECT_EQ(memo[4].u, 7u);
  EXPECT_EQ(memo[1].u, 1u);  // slots 1 and 4 shared an entry
  EXPECT_EQ(memo[7].u, 1u);
  EXPECT_EQ(memo[7].aux, 2u);
  memo.push_back(Value::interned(1, 1));  // another tag: another value
  EXPECT_EQ(memo[1000].aux, 1u);
  EXPECT_EQ(memo[1].aux, 2u);
}

}  // namespace frames_lists_tests
}  // namespace memsnap
