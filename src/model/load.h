// The one call that turns a path into a Snapshot: open, detect, read (streaming), build.
#pragma once

#include <cstdint>
#include <string>

#include "model/snapshot.h"
#include "read/input.h"
#include "read/split_trace.h"

namespace memsnap {

struct LoadOptions {
  std::uint64_t max_trace_events = 1'000'000;  // newest events kept per device
  // Threads for the later parts of a long trace (read/split_trace.h); in the environment,
  // for load_snapshot (to time the read with other settings): MEMSNAP_SPLIT=0 turns it off,
  // MEMSNAP_SPLIT_THREADS=N sets the threads, MEMSNAP_SPLIT_EARLY=0 starts them at the trace
  // instead of with the read, MEMSNAP_SPLIT_AT=F where the first starts (a fraction of what is
  // left), MEMSNAP_SPLIT_MIN_ENTRY_BYTES=B the shortest entries (bytes an entry on average) it splits.
  SplitTuning split;
};

struct InputInfo {
  std::string path;
  Format format = Format::Pickle;
  Compression compression = Compression::None;
  std::uint64_t bytes = 0;  // on disk
  int pickle_protocol = 0;
  std::uint64_t trailing_bytes = 0;
  std::uint64_t trace_entries = 0;        // streamed to the builder
  std::uint64_t split_trace_entries = 0;  // of which the trace split's threads decoded
  std::uint64_t split_parts = 0;          // parts of the trace adopted from those threads
  std::uint64_t split_parts_from_start = 0;  // of which threads started with the read
};

struct LoadedSnapshot {
  InputInfo input;
  Snapshot snapshot;
};

// Throws InputError for anything that cannot be analyzed.
LoadedSnapshot load_snapshot(const std::string& path, const LoadOptions& options = {});
// The same from bytes in memory (tests and fuzzing).
LoadedSnapshot load_snapshot_bytes(InputBytes input, const std::string& label, const LoadOptions& options = {});

}  // namespace memsnap
