// The data-only pickle VM: every supported opcode, memo sharing, refused opcodes, limits and
// corrupt input (truncation at every byte, random mutations).
#include <gtest/gtest.h>

#include <random>

#include "base/error.h"
#include "pickle_writer.h"
#include "read/pickle_reader.h"
#include "test_support.h"

namespace memsnap {
namespace pickle_reader_tests {

using test::PickleWriter;

Value read(const PickleWriter& w, Document& doc) {
  read_pickle(w.bytes(), doc, nullptr);
  return doc.root;
}

std::string error_of(const std::vector<std::uint8_t>& bytes) {
  Document doc;
  try {
    read_pickle(bytes, doc, nullptr);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(PickleReader, SmallIntegers) {
  Document doc;
  PickleWriter w;
  w.mark().integer(0).integer(255).integer(256).integer(65535).integer(-1).integer(-2147483648LL).integer(2147483647).op('l').stop();
  Value list = read(w, doc);
  std::vector<std::int64_t> got;
  for (const Value& v : doc.items(list)) {
    ASSERT_EQ(v.kind, Kind::Int);
    got.push_back(v.i);
  }
  EXPECT_EQ(got, (std::vector<std::int64_t>{0, 255, 256, 65535, -1, -2147483648LL, 2147483647}));
}

TEST(PickleReader, Long1AndLong4) {
  Document doc;
  PickleWriter w;
  w.mark();
  w.integer(0x7f0000000000LL);                       // 6-byte address
  w.integer(1713558427168556LL);                     // 7-byte time_us
  w.integer(-5000000000LL);                          // negative LONG1
  w.op(0x8a).u8(0);                                  // LONG1 of zero length = 0
  w.op(0x8a).u8(9).le(0x8000000000000000ull, 8).u8(0);  // 2^63: needs a 9th byte
  w.op(0x8a).u8(9).le(0xffffffffffffffffull, 8).u8(0xff);  // -1, non-minimal 9 bytes
  w.op(0x8a).u8(10).le(0, 8).u8(0).u8(1);            // 2^72: too wide
  w.op(0x8b).le(2, 4).u8(0x34).u8(0x12);             // LONG4 0x1234
  w.op('l').stop();
  Value list = read(w, doc);
  std::vector<Value> v;
  for (const Value& x : doc.items(list)) v.push_back(x);
  ASSERT_EQ(v.size(), 8u);
  EXPECT_EQ(v[0].i, 0x7f0000000000LL);
  EXPECT_EQ(v[1].i, 1713558427168556LL);
  EXPECT_EQ(v[2].i, -5000000000LL);
  EXPECT_EQ(v[3].i, 0);
  EXPECT_EQ(v[4].kind, Kind::UInt);
  EXPECT_EQ(v[4].u, 0x8000000000000000ull);
  EXPECT_EQ(v[5].kind, Kind::Int);
  EXPECT_EQ(v[5].i, -1);
  EXPECT_EQ(v[6].kind, Kind::BigInt);
  EXPECT_EQ(v[7].i, 0x1234);
}

TEST(PickleReader, ScalarsStringsAndBytes) {
  Document doc;
  PickleWriter w(5);
  const std::string long_str(300, 'x');
  w.mark().real(0.25).real(-1.5).boolean(true).boolean(false).none().str("short").binunicode(long_str);
  w.op(0x8d).le(3, 8).raw("abc");           // BINUNICODE8
  w.op('C').u8(2).raw("\x01\x02");          // SHORT_BINBYTES
  w.op('B').le(1, 4).raw("z");              // BINBYTES
  w.op(0x8e).le(0, 8);                      // BINBYTES8, empty
  w.op(0x96).le(1, 8).raw("q");             // BYTEARRAY8
  w.op('l').stop();
  Value list = read(w, doc);
  std::vector<Value> v;
  for (const Value& x : doc.items(list)) v.push_back(x);
  ASSERT_EQ(v.size(), 12u);
  EXPECT_DOUBLE_EQ(v[0].f, 0.25);
  EXPECT_DOUBLE_EQ(v[1].f, -1.5);
  EXPECT_EQ(v[2].kind, Kind::Bool);
  EXPECT_EQ(v[2].i, 1);
  EXPECT_EQ(v[3].i, 0);
  EXPECT_EQ(v[4].kind, Kind::None);
  EXPECT_EQ(v[5].str(), "short");
  EXPECT_EQ(v[6].str(), long_str);
  EXPECT_EQ(v[7].str(), "abc");
  EXPECT_EQ(v[8].kind, Kind::Bytes);
  EXPECT_EQ(v[8].str(), std::string("\x01\x02"));
  EXPECT_EQ(v[9].str(), "z");
  EXPECT_EQ(v[10].aux, 0u);
  EXPECT_EQ(v[11].str(), "q");
}

TEST(PickleReader, TuplesListsDictsSets) {
  Document doc;
  PickleWriter w;
  w.mark();
  w.op(')');                                        // EMPTY_TUPLE
  w.integer(1).op(0x85);                            // TUPLE1
  w.integer(1).integer(2).op(0x86);                 // TUPLE2
  w.integer(1).integer(2).integer(3).op(0x87);      // TUPLE3
  w.mark().integer(1).integer(2).integer(3).integer(4).op('t');  // TUPLE
  w.mark().str("k").integer(7).op('d');             // DICT
  w.dict().str("a").integer(1).setitem();           // EMPTY_DICT + SETITEM
  w.list().integer(9).append();                     // EMPTY_LIST + APPEND
  w.op(0x8f).mark().integer(1).integer(2).op(0x90);  // EMPTY_SET + ADDITEMS
  w.mark().integer(5).op(0x91);                     // FROZENSET
  w.op('l').stop();
  Value list = read(w, doc);
  std::vector<Value> v;
  for (const Value& x : doc.items(list)) v.push_back(x);
  ASSERT_EQ(v.size(), 10u);
  EXPECT_EQ(v[0].kind, Kind::Tuple);
  EXPECT_EQ(doc.size(v[0]), 0u);
  EXPECT_EQ(doc.size(v[1]), 1u);
  EXPECT_EQ(doc.size(v[2]), 2u);
  EXPECT_EQ(doc.size(v[3]), 3u);
  EXPECT_EQ(doc.size(v[4]), 4u);
  ASSERT_NE(doc.find(v[5], "k"), nullptr);
  EXPECT_EQ(doc.find(v[5], "k")->i, 7);
  EXPECT_EQ(doc.find(v[6], "a")->i, 1);
  EXPECT_EQ(doc.find(v[6], "missing"), nullptr);
  EXPECT_EQ(doc.size(v[7]), 1u);
  EXPECT_EQ(v[8].kind, Kind::Set);
  EXPECT_EQ(doc.size(v[8]), 2u);
  EXPECT_EQ(doc.size(v[9]), 1u);
}

TEST(PickleReader, StackManipulation) {
  Document doc;
  PickleWriter w;
  w.mark().integer(1).integer(2).op('0');  // POP drops 2
  w.mark().integer(8).integer(9).op('1');  // POP_MARK drops the inner mark and its items
  w.op('2');                               // DUP duplicates 1
  w.op('l').stop();
  Value list = read(w, doc);
  std::vector<std::int64_t> got;
  for (const Value& x : doc.items(list)) got.push_back(x.i);
  EXPECT_EQ(got, (std::vector<std::int64_t>{1, 1}));
}

TEST(PickleReader, MemoSharesContainers) {
  Document doc;
  PickleWriter w(2);
  // [L, L, L] where L = [1] is written once and fetched through BINGET / LONG_BINGET.
  w.list().binput(0).mark();
  w.list().long_binput(1).integer(1).append();
  w.binget(1).long_binget(1).appends().stop();
  Value outer = read(w, doc);
  std::vector<std::uint64_t> ids;
  for (const Value& x : doc.items(outer)) ids.push_back(x.index);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(ids[1], ids[2]);
}

TEST(PickleReader, FramesAndTrailingBytesAreTolerated) {
  PickleWriter w;
  w.op(0x95).le(3, 8).integer(5).stop().raw(std::string("\0\0\0", 3));
  Document doc;
  const PickleInfo info = read_pickle(w.bytes(), doc, nullptr);
  EXPECT_EQ(doc.root.i, 5);
  EXPECT_EQ(info.trailing_bytes, 3u);
  EXPECT_EQ(info.protocol, 4);
}

TEST(PickleReader, RefusesEveryObjectConstructingOpcode) {
  const std::pair<std::uint8_t, const char*> refused[] = {
      {'c', "GLOBAL"}, {0x93, "STACK_GLOBAL"}, {'R', "REDUCE"}, {'b', "BUILD"}, {'i', "INST"},
      {'o', "OBJ"}, {0x81, "NEWOBJ"}, {0x92, "NEWOBJ_EX"}, {'P', "PERSID"}, {'Q', "BINPERSID"},
      {0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"}, {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"}};
  for (const auto& [code, name] : refused) {
    PickleWriter w;
    w.integer(1).op(code).raw("os\nsystem\n").stop();
    const std::string err = error_of(w.bytes());
    EXPECT_EQ(err, std::string("refusing pickle opcode ") + name +
                       " at byte 4: it would import, construct or call Python objects, which a memory snapshot never "
                       "does; memsnap reads only plain-data snapshot pickles; do not unpickle this file, and capture a "
                       "snapshot with torch.cuda.memory._dump_snapshot() (run `memsnap capture`)");
  }
}

TEST(PickleReader, TextProtocolOpcodesAreNamed) {
  PickleWriter w;
  w.op('I').raw("12\n").stop();
  EXPECT_NE(error_of(w.bytes()).find("unsupported pickle opcode INT at byte 2"), std::string::npos);
  PickleWriter u;
  u.op(0xff).stop();
  EXPECT_NE(error_of(u.bytes()).find("malformed pickle at byte 2: unknown opcode byte 0xff"), std::string::npos);
}

TEST(PickleReader, RejectsUnsupportedProtocols) {
  EXPECT_NE(error_of({0x80, 0x01, 'N', '.'}).find("unsupported pickle protocol 1"), std::string::npos);
  EXPECT_NE(error_of({0x80, 0x06, 'N', '.'}).find("unsupported pickle protocol 6"), std::string::npos);
}

// A BINPUT index past the memo's end names one slot; the skipped ones are never made (a 1.3 KB
// file of such puts used to make 1 GiB of slots).
TEST(PickleReader, MemoIndicesThatSkipAheadMakeOnlyTheirSlots) {
  PickleWriter w;
  w.mark();
  for (std::uint32_t k = 1; k <= 260; ++k) w.integer(k).long_binput(k * 1000000u);
  w.long_binget(7000000u).long_binget(260000000u).op('l').stop();
  ASSERT_LT(w.bytes().size(), 2000u);
  Document doc;
  const PickleInfo info = read_pickle(w.bytes(), doc, nullptr);
  EXPECT_EQ(info.memo_entries, 260u);
  std::vector<std::int64_t> last;
  for (const Value& v : doc.items(doc.root)) last.push_back(v.i);
  ASSERT_EQ(last.size(), 262u);
  EXPECT_EQ(last[260], 7);
  EXPECT_EQ(last[261], 260);
}

// MEMOIZE puts at len(memo), as Python's Unpickler does, also when earlier puts skipped ahead;
// a dense put at a sparse index replaces it.
TEST(PickleReader, MemoizeAfterSparsePutsCountsEntries) {
  PickleWriter w;
  w.mark().integer(5).long_binput(1000).integer(6).memoize().integer(7).binput(0).integer(8).binput(1);
  w.binget(1).long_binget(1000).op('l').stop();
  Document doc;
  read(w, doc);
  std::vector<std::int64_t> got;
  for (const Value& v : doc.items(doc.root)) got.push_back(v.i);
  // 6 went to index 1 (one entry before it), then 7 replaced it at 0 and 8 at 1.
  EXPECT_EQ(got, (std::vector<std::int64_t>{5, 6, 7, 8, 8, 5}));
  EXPECT_EQ(error_of(PickleWriter().integer(1).long_binput(1000).long_binget(999).stop().bytes()),
            "malformed pickle at byte 9: memo entry 999 is read before it was written; " + std::string(kRecaptureRemedy));
}

TEST(PickleReader, StructuralErrorsAreReported) {
  EXPECT_NE(error_of(PickleWriter().appends().stop().bytes()).find("APPENDS without a MARK"), std::string::npos);
  EXPECT_NE(error_of(PickleWriter().append().stop().bytes()).find("APPEND needs a value but the stack is empty"), std::string::npos);
  EXPECT_NE(error_of(PickleWriter().integer(1).integer(2).append().stop().bytes()).find("APPEND to a int"), std::string::npos);
  EXPECT_NE(error_of(PickleWriter().dict().mark().integer(1).setitems().stop().bytes()).find("odd number of items"), std::string::npos);
  EXPECT_NE(error_of(PickleWriter().binget(3).stop().bytes()).find("memo entry 3 is read before it was written"), std::string::npos);
  EXPECT_NE(error_of(PickleWriter().integer(1).long_binput(0x7fffffff).stop().bytes()).find("memo index 2147483647 is beyond"),
            std::string::npos);
  EXPECT_NE(error_of(PickleWriter().stop().bytes()).find("STOP with an empty stack"), std::string::npos);
}

TEST(PickleReader, AbsurdLengthsAreCleanErrors) {
  PickleWriter a;
  a.op('X').le(0xfffffff0u, 4).raw("abc");
  EXPECT_NE(error_of(a.bytes()).find("exceeds memsnap's limit of 1073741824 bytes"), std::string::npos);
  PickleWriter b;
  b.op(0x8d).le(1ull << 62, 8);
  EXPECT_NE(error_of(b.bytes()).find("exceeds memsnap's limit"), std::string::npos);
  PickleWriter c;
  c.op('X').le(1000, 4).raw("short");
  EXPECT_NE(error_of(c.bytes()).find("the pickle ends unexpectedly"), std::string::npos);
  PickleWriter d;
  d.op(0x8b).le(0x7fffffff, 4);
  EXPECT_NE(error_of(d.bytes()).find("exceeds memsnap's limit"), std::string::npos);
  PickleWriter e;
  e.op(0x8b).le(0xffffffff, 4);
  EXPECT_NE(error_of(e.bytes()).find("LONG4 with a negative length"), std::string::npos);
}

TEST(PickleReader, NestingIsLimited) {
  PickleWriter w;
  for (int i = 0; i < 100000; ++i) w.mark();
  EXPECT_NE(error_of(w.bytes()).find("nesting deeper than memsnap's limit of 512"), std::string::npos);
  // Deep but legal list nesting through APPEND never recurses.
  PickleWriter deep;
  for (int i = 0; i < 50000; ++i) deep.list();
  for (int i = 0; i < 49999; ++i) deep.append();
  deep.stop();
  EXPECT_EQ(error_of(deep.bytes()), "");
}

TEST(PickleReader, TruncationAtEveryByteIsACleanError) {
  const auto full = test::from_hex(test::kSpecVectorHex);
  ASSERT_EQ(full.size(), 649u);
  for (std::size_t n = 0; n < full.size(); ++n) {
    std::vector<std::uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string err = test::load_error(cut);
    ASSERT_FALSE(err.empty()) << "prefix of " << n << " bytes loaded";
    if (n == 0) EXPECT_EQ(err, "the file is empty; re-capture it with torch.cuda.memory._dump_snapshot() (run `memsnap capture`) and check the copy is complete");
    else if (n > 11) EXPECT_NE(err.find("ends unexpectedly"), std::string::npos) << n << ": " << err;
  }
}

TEST(PickleReader, RandomMutationsNeverCrash) {
  const auto full = test::from_hex(test::kSpecVectorHex);
  std::mt19937 rng(12345);
  int loaded = 0, rejected = 0;
  for (int round = 0; round < 4000; ++round) {
    auto bytes = full;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) bytes[rng() % bytes.size()] = static_cast<std::uint8_t>(rng());
    try {
      test::load_bytes(bytes);
      ++loaded;
    } catch (const InputError&) {
      ++rejected;
    }
  }
  EXPECT_EQ(loaded + rejected, 4000);
  EXPECT_GT(rejected, 1000);
}

}  // namespace pickle_reader_tests
}  // namespace memsnap

namespace memsnap {
namespace pickle_reader_tests {

// The shipped example (a real PyTorch layout with a 627-event trace, decoded by the reader's fast
// path) cut short anywhere: always a clean "truncated" error, never a read past the end (the
// cut copies have exactly their size, so AddressSanitizer sees any overread).
TEST(PickleReader, TruncatedSnapshotWithTracesIsACleanError) {
  const auto full = test::read_file(std::string(MEMSNAP_DATA_DIR) + "/example.pickle");
  ASSERT_GT(full.size(), 60000u);
  auto check = [&](std::size_t n) {
    std::vector<std::uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    cut.shrink_to_fit();
    const std::string err = test::load_error(cut);
    ASSERT_NE(err.find("ends unexpectedly"), std::string::npos) << n << ": " << err;
  };
  const std::size_t middle = full.size() / 2;  // inside device_traces
  for (std::size_t n = middle; n < middle + 1500; ++n) check(n);
  for (std::size_t n = 16; n < full.size(); n += 97) check(n);
}

}  // namespace pickle_reader_tests
}  // namespace memsnap
