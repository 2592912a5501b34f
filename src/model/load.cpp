// load_snapshot: reader selection by content, streaming trace entries into the builder.
#include "model/load.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "base/phase_timer.h"
#include "model/builder.h"
#include "read/json_reader.h"
#include "read/pickle_reader.h"
#include "read/value.h"

namespace memsnap {

LoadedSnapshot load_snapshot_bytes(InputBytes input, const std::string& label, const LoadOptions& options) {
  LoadedSnapshot out;
  out.input.path = label;
  out.input.format = input.format;
  out.input.compression = input.compression;
  out.input.bytes = input.file_bytes;
  Document doc;
  SnapshotBuilder builder(out.snapshot, options.max_trace_events, input.bytes().size());
  if (input.format == Format::Pickle) {
    const PickleInfo info = read_pickle(input.bytes(), doc, &builder, input.file_backed(), options.split);
    out.input.pickle_protocol = info.protocol;
    out.input.trailing_bytes = info.trailing_bytes;
    out.input.trace_entries = info.streamed_entries;
    out.input.split_trace_entries = info.split_entries;
    out.input.split_parts = info.split_parts;
    out.input.split_parts_from_start = info.split_parts_from_start;
    builder.finish(doc);
  } else {
    JsonReader reader;
    reader.read(input.bytes(), doc, &builder);
    builder.finish(doc);
  }
  return out;
}

LoadedSnapshot load_snapshot(const std::string& path, const LoadOptions& options) {
  PhaseTimer timer("read");
  LoadOptions tuned = options;
  if (const char* v = std::getenv("MEMSNAP_SPLIT"); v && std::string_view(v) == "0") tuned.split.enabled = false;
  if (const char* v = std::getenv("MEMSNAP_SPLIT_THREADS")) tuned.split.threads = static_cast<unsigned>(std::clamp(std::atoi(v), 0, 16));
  if (const char* v = std::getenv("MEMSNAP_SPLIT_EARLY"); v && std::string_view(v) == "0") tuned.split.early = false;
  if (const char* v = std::getenv("MEMSNAP_SPLIT_AT")) tuned.split.at = std::clamp(std::atof(v), 0.0, 0.95);
  if (const char* v = std::getenv("MEMSNAP_SPLIT_MIN_ENTRY_BYTES")) tuned.split.min_entry_bytes = static_cast<std::size_t>(std::atoll(v));
  LoadedSnapshot loaded = load_snapshot_bytes(open_input(path), path, tuned);
  if (profiling_enabled()) {
    std::fprintf(stderr, "memsnap: profile: split %llu of %llu trace entries (%llu parts, %llu started with the read)\n",
                 static_cast<unsigned long long>(loaded.input.split_trace_entries),
                 static_cast<unsigned long long>(loaded.input.trace_entries),
                 static_cast<unsigned long long>(loaded.input.split_parts),
                 static_cast<unsigned long long>(loaded.input.split_parts_from_start));
  }
  return loaded;
}

}  // namespace memsnap
