// Reads a JSON snapshot (same keys as the pickle; tuples become arrays) into the value arena,
// streaming device_traces entries to the sink like the pickle reader does.
#pragma once

#include <memory>
#include <span>

#include "read/pickle_reader.h"
#include "read/value.h"

namespace memsnap {

// Keeps simdjson's parsed strings alive; the document's string values point into it.
class JsonReader {
 public:
  JsonReader();
  ~JsonReader();
  // Throws InputError on malformed JSON. `sink` may be null.
  void read(std::span<const std::uint8_t> bytes, Document& doc, TraceEntrySink* sink);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memsnap
