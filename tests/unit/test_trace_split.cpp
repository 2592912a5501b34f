// The trace split (read/split_trace.h): a read where threads decode later parts of the trace
// gives the serial read's snapshot, byte for byte, wherever they start, however many they are,
// whatever they stop at, and when what they assumed turns out wrong; and a split read of a file
// malformed after the split fails with the serial read's error.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/load.h"
#include "read/input.h"
#include "read/pickle_vm.h"
#include "report/dump.h"
#include "test_support.h"

namespace memsnap {
namespace {

// Every dump of the snapshot, one after another (what the 1 GB comparisons use).
std::string dumps(const Snapshot& snapshot) {
  std::string all;
  for (const DumpWhat what : {DumpWhat::Segments, DumpWhat::Blocks, DumpWhat::Trace, DumpWhat::Frames, DumpWhat::Settings,
                              DumpWhat::Annotations}) {
    char* buffer = nullptr;
    std::size_t size = 0;
    std::FILE* out = open_memstream(&buffer, &size);
    write_dump(snapshot, what, out);
    std::fclose(out);
    all.append(buffer, size);
    std::free(buffer);
  }
  return all;
}

// The split forced on a small file: no minimum size, on one core too, early in the trace, and the
// threads left to finish what they can (so what they take does not depend on the machine's load).
// `early`: the threads start with the read, from the skimmed memo; otherwise at the trace, from a
// copy of the reader's.
SplitTuning forced(double at, std::ptrdiff_t base_error = 0, unsigned threads = 1, bool early = true) {
  return {.enabled = true,
          .min_bytes = 0,
          .threads = threads,
          .early = early,
          .at = at,
          .on_one_core = true,
          .after_entries = 64,
          .min_entry_bytes = 0,
          .base_error = base_error,
          .wait = true};
}

LoadedSnapshot load(const std::vector<std::uint8_t>& bytes, const SplitTuning& split) {
  return load_snapshot_bytes(input_from_memory(bytes), "test", {.max_trace_events = 100'000'000, .split = split});
}

// The amplified example (tests/CMakeLists.txt: 46 copies of tests/data/example.pickle, 28,842
// trace entries with a fresh frames list per traceback, as PyTorch writes them).
std::vector<std::uint8_t> amplified_example() {
  return test::read_file(std::string(MEMSNAP_FIXTURE_DIR) + "/split_example.pickle");
}

TEST(TraceSplit, ASplitReadIsTheSerialReadWhereverTheThreadStarts) {
  const std::vector<std::uint8_t> bytes = amplified_example();
  const LoadedSnapshot serial = load(bytes, {.enabled = false});
  ASSERT_EQ(serial.input.split_trace_entries, 0u);
  const std::string expected = dumps(serial.snapshot);
  for (const bool early : {true, false}) {
    std::uint64_t most = 0;
    for (const double at : {0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95}) {
      const LoadedSnapshot split = load(bytes, forced(at, 0, 1, early));
      EXPECT_EQ(split.input.trace_entries, serial.input.trace_entries) << at;
      EXPECT_LT(split.input.split_trace_entries, split.input.trace_entries) << at;
      // Started with the read, the thread took its part (the reader did not start another at the trace).
      EXPECT_EQ(split.input.split_parts_from_start, early ? split.input.split_parts : 0u) << at;
      EXPECT_EQ(dumps(split.snapshot), expected) << "split at " << at << (early ? " from the start" : " from the trace")
                                                 << " (" << split.input.split_trace_entries << " entries from the second thread)";
      most = std::max(most, split.input.split_trace_entries);
    }
    // The thread took a real share somewhere: the comparison above is not serial against serial.
    EXPECT_GT(most, serial.input.trace_entries / 5) << early;
  }
}

// Up to kMaxSplitThreads threads, each decoding up to where the next one started: the parts tile
// what one thread from the same start decodes, and each is adopted.
TEST(TraceSplit, ASplitReadInSeveralPartsIsTheSerialRead) {
  const std::vector<std::uint8_t> bytes = amplified_example();
  const LoadedSnapshot serial = load(bytes, {.enabled = false});
  const std::string expected = dumps(serial.snapshot);
  for (const bool early : {true, false}) {
    for (const double at : {0.1, 0.3, 0.6}) {
      const LoadedSnapshot one = load(bytes, forced(at, 0, 1, early));
      ASSERT_EQ(one.input.split_parts, 1u) << early;
      ASSERT_GT(one.input.split_trace_entries, 0u) << early;
      for (const unsigned threads : {2u, 3u, 4u}) {
        const LoadedSnapshot split = load(bytes, forced(at, 0, threads, early));
        EXPECT_EQ(split.input.split_parts, threads) << threads << " threads from " << at << ", early " << early;
        EXPECT_EQ(split.input.split_parts_from_start, early ? threads : 0u) << threads << " threads from " << at;
        EXPECT_EQ(split.input.split_trace_entries, one.input.split_trace_entries) << threads << " threads from " << at;
        EXPECT_EQ(dumps(split.snapshot), expected) << threads << " threads from " << at << ", early " << early;
      }
    }
  }
}

TEST(TraceSplit, AWrongMemoSizeAtTheSplitIsNoticedAndTheReaderReadsOnItself) {
  const std::vector<std::uint8_t> bytes = amplified_example();
  const std::string expected = dumps(load(bytes, {.enabled = false}).snapshot);
  for (const std::ptrdiff_t error : {-1, 1, 1000}) {
    for (const unsigned threads : {1u, 3u}) {
      for (const bool early : {true, false}) {
        const LoadedSnapshot split = load(bytes, forced(0.5, error, threads, early));
        EXPECT_EQ(split.input.split_trace_entries, 0u) << error << ", " << threads << " threads, early " << early;
        EXPECT_EQ(dumps(split.snapshot), expected) << error << ", " << threads << " threads, early " << early;
      }
    }
  }
}

// Threads started with the read take the trace's keys from a walk over the bytes before it; the
// reader checks them against its own memo before it adopts anything.
TEST(TraceSplit, AWrongSkimmedKeyIsNoticedAndTheReaderReadsOnItself) {
  const std::vector<std::uint8_t> bytes = amplified_example();
  const std::string expected = dumps(load(bytes, {.enabled = false}).snapshot);
  for (const unsigned threads : {1u, 3u}) {
    SplitTuning tuning = forced(0.3, 0, threads);
    const LoadedSnapshot right = load(bytes, tuning);
    ASSERT_EQ(right.input.split_parts_from_start, threads);
    tuning.skim_error = true;
    const LoadedSnapshot wrong = load(bytes, tuning);
    EXPECT_EQ(wrong.input.split_parts_from_start, 0u) << threads << " threads";
    EXPECT_EQ(dumps(wrong.snapshot), expected) << threads << " threads";
  }
}

TEST(TraceSplit, ABadByteAfterTheSplitFailsAsTheSerialReadFails) {
  std::vector<std::uint8_t> bytes = amplified_example();
  // An opcode memsnap refuses, in the middle of an entry three quarters into the file.
  std::size_t at = bytes.size() * 3 / 4;
  while (bytes[at] != 0x8a) ++at;  // a LONG1 (an address or a time)
  bytes[at] = 'c';                 // GLOBAL
  std::string serial_error, split_error;
  try {
    load(bytes, {.enabled = false});
  } catch (const InputError& e) {
    serial_error = e.what();
  }
  EXPECT_NE(serial_error.find("GLOBAL"), std::string::npos) << serial_error;
  for (const unsigned threads : {1u, 3u}) {
    for (const bool early : {true, false}) {
      try {
        load(bytes, forced(0.3, 0, threads, early));
      } catch (const InputError& e) {
        split_error = e.what();
      }
      EXPECT_EQ(split_error, serial_error) << threads << " threads, early " << early;
      split_error.clear();
    }
  }
}

// Each thread's memo: the reader's slots, but its containers (nearly every value before the
// trace: the segments' blocks and their lists) one shared entry, so that several threads' copies
// do not hold the segments' values several times over.
TEST(TraceSplit, TheThreadsMemoHoldsTheReadersContainersAsOneEntry) {
  using pickle_vm::Memo;
  Memo reader;
  const char* text = "active_allocated";
  for (std::uint64_t k = 0; k < 1000; ++k) {
    reader.push_back(Value::container(k % 2 ? Kind::Dict : Kind::List, k));
    if (k % 250 == 0) reader.push_back(Value::string(text, 16));
  }
  reader.push_back(Value::interned(7, 42));
  const Value marker = Value::interned(pickle_vm::kSplitSlotTag, 0);
  const Memo copy = reader.split_copy(marker);
  ASSERT_EQ(copy.size(), reader.size());
  EXPECT_EQ(reader.value_entries(), 1u + 1000u + 1u + 1u);  // released, containers, the str (shared), the interned
  EXPECT_EQ(copy.value_entries(), 1u + 1u + 1u + 1u);       // released, the marker, the str, the interned
  for (std::size_t i = 0; i < reader.size(); ++i) {
    const Value& was = reader[i];
    const Value& is = copy[i];
    if (was.is_container()) {
      EXPECT_TRUE(pickle_vm::is_split_slot(is)) << i;
    } else {
      EXPECT_EQ(is.kind, was.kind) << i;
      EXPECT_EQ(is.aux, was.aux) << i;
      EXPECT_EQ(is.u, was.u) << i;
    }
  }
}

// The real snapshots (when ../shared/corpus/real is there): every one read with the split
// forced at three places gives the serial read's snapshot.
TEST(TraceSplit, EveryRealSnapshotReadSplitIsItsSerialRead) {
  const std::filesystem::path dir = test::corpus_dir();
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no corpus at " << dir;
  std::size_t files = 0, split_files = 0, early_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".pickle" && ext != ".pkl") continue;
    const std::vector<std::uint8_t> bytes = test::read_file(entry.path().string());
    std::string expected;
    try {
      expected = dumps(load(bytes, {.enabled = false}).snapshot);
    } catch (const InputError&) {
      continue;  // a file memsnap refuses is refused alike (the hostile tests)
    }
    ++files;
    // Threads started with the read (the default) at three places, and started at the trace at one.
    bool took_early = false;
    for (const double at : {0.3, 0.5, 0.7}) {
      const LoadedSnapshot early = load(bytes, forced(at));
      took_early |= early.input.split_parts_from_start > 0;
      EXPECT_EQ(dumps(early.snapshot), expected) << entry.path().filename() << " split at " << at << " from the start";
    }
    const LoadedSnapshot split = load(bytes, forced(0.3, 0, 1, false));
    EXPECT_EQ(dumps(split.snapshot), expected) << entry.path().filename() << " split at 0.3 from the trace";
    const LoadedSnapshot parts = load(bytes, forced(0.2, 0, 3));
    EXPECT_EQ(dumps(parts.snapshot), expected) << entry.path().filename() << " in 3 parts";
    split_files += split.input.split_trace_entries > 0;
    early_files += took_early;
  }
  EXPECT_GT(files, 40u);
  // The thread stops early in most real files (a frame dict new in its part, a pool-id tuple); of
  // the 53 that load it takes entries in 18 started with the read, in 14 started at the trace.
  EXPECT_GE(early_files, 15u) << "the split from the start took entries in too few files for this to test it";
  EXPECT_GE(split_files, 12u) << "the split from the trace took entries in too few files for this to test it";
}

}  // namespace
}  // namespace memsnap
