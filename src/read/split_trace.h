// The trace split: threads decode later parts of a long device_traces list while the reader
// decodes the part before them, and the reader adopts what they decoded (trace_split.cpp).
//
// Each thread starts at a batch of entries (APPENDS MARK EMPTY_DICT MEMOIZE MARK): with one
// thread about halfway through the trace, with N at 1/(N+1), 2/(N+1), ... of it, and each
// decodes until the batch where the next one started (the last: to the list's end). The threads
// start with the read: a walk over the opcodes before the trace's second batch (memo_skim.h)
// gives the memo there without decoding it, and each thread's memo holds the strs it saw at
// their slots. Where that walk gives up they start once the reader has streamed the trace's
// first entries, from a copy of the reader's memo. Either way every slot a thread cannot know (a
// container of the reader's arena, a slot written before its start, any slot the walk did not
// see a str in) is held as a reference to the reader's slot, and its own slots are numbered
// from the memo size the reader will have at its start (learned from the trace: an alloc's new
// frames list and the free that names it by slot number). When the reader reaches a thread's
// start it checks that number and the skimmed strs against its own memo, stops the
// thread at its next batch end (one that reached the next thread's start has ended already),
// resolves the references against its own memo, hands the events to the sink in file order,
// appends the thread's memo slots to its own, and reads on after the last batch the thread
// finished: where the next thread started, or short of it, and then the reader decodes up to it.
// Anything a thread does not take exactly as the reader would (an entry the typed fast path
// refuses, a new frame dict, a 2026 field with content, a container) ends its work at the batch
// before it. The result is the serial read's, byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstddef>
#include <vector>

#include "base/big_vector.h"
#include "read/value.h"

namespace memsnap {

// How the reader splits (the defaults are what the CLI uses; tests force small splits).
struct SplitTuning {
  bool enabled = true;
  std::size_t min_bytes = std::size_t(64) << 20;  // split only when this much of the file is left at the trace
  unsigned threads = 0;                           // 0: one a core beyond the reader's, at most kMaxSplitThreads
  bool early = true;                              // start the threads with the read (the memo before the trace skimmed)
  double at = 0;                                  // the first thread starts this far into the trace after its first
                                                  // batches (0: 1/(threads+1)), the others evenly after it
  bool on_one_core = false;                       // start a thread even on a single-core machine
  std::size_t after_entries = 4096;               // entries streamed first (the trace's keys are memoized by then)
  std::size_t min_entry_bytes = 160;              // split only traces of at least this many bytes an entry
  std::ptrdiff_t base_error = 0;                  // tests: added to the memo size the thread learns
  bool skim_error = false;                        // tests: the skimmed strs "addr" and "size" swapped
  bool wait = false;                              // tests: the reader waits for the threads to know their starts, then lets them finish (no timing)
};

// The most threads a read splits its trace into. Chosen, not measured: on a 16-core host one
// thread decoded its half at 1.5-1.9 GB/s while the reader, feeding the builder, took over twice
// as long for its own (bench/README §21); 2-4 parts have not been timed there yet.
inline constexpr unsigned kMaxSplitThreads = 4;

// One trace entry as a split thread decoded it (32 bytes).
struct SplitEvent {
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::int64_t time_us = 0;
  std::uint32_t stack = 0;   // SplitTrace::kNoStack, a local stack, or a reference (see below)
  std::uint16_t stream = 0;  // index into SplitTrace::streams
  std::uint8_t action = 0;   // index into SplitTrace::actions
  bool has_time = false;
};
static_assert(sizeof(SplitEvent) == 32);

// What a split thread decoded, in file order. References (frames of a local stack, an event's
// stack) are 32-bit: kSlot | n names the reader's memo slot n (at most 2^28), kValue | k names
// values[k] (a value of the reader's memo the thread copied, such as an interned stack or frame);
// otherwise a local stack's index (an event) or a frame id the reader's memo had cached (a frame).
struct SplitTrace {
  static constexpr std::uint32_t kSlot = 0x80000000u;
  static constexpr std::uint32_t kValue = 0x40000000u;
  static constexpr std::uint32_t kIndex = 0x3fffffffu;
  static constexpr std::uint32_t kNoStack = 0xffffffffu;
  static bool is_slot(std::uint32_t r) { return r != kNoStack && (r & (kSlot | kValue)) == kSlot; }
  static bool is_value(std::uint32_t r) { return r != kNoStack && (r & (kSlot | kValue)) == kValue; }
  static bool is_reference(std::uint32_t r) { return is_slot(r) || is_value(r); }

  // An event's stack once the reader resolved its reference (kSlot | kValue | stack id).
  static constexpr std::uint32_t kResolved = kSlot | kValue;

  BigVector<SplitEvent> events;
  std::vector<Value> actions;                 // the action strs as read (a str, or kSlot's value)
  std::vector<std::size_t> action_first;      // by action: its first event
  std::vector<std::int64_t> streams;          // the streams, as read
  std::vector<std::size_t> stream_first;      // by stream: its first event
  std::vector<std::uint32_t> stack_offsets{0};  // local stack k: stack_frames[offsets[k], offsets[k + 1])
  std::vector<std::uint32_t> stack_frames;
  std::vector<std::size_t> stack_first;       // by local stack: the event whose frames list made it
  std::vector<std::size_t> reference_events;  // the events whose stack is a reference, in order
  std::vector<Value> values;

  std::size_t stack_count() const { return stack_offsets.size() - 1; }
};

}  // namespace memsnap
