// libFuzzer target: any bytes through format detection, the readers, the model and the totals.
// Only InputError may escape; anything else (crash, sanitizer report, other exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "analysis/analyze.h"
#include "base/error.h"
#include "model/load.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    auto loaded = memsnap::load_snapshot_bytes(memsnap::input_from_memory(std::vector<std::uint8_t>(data, data + size)),
                                               "fuzz", {1000});
    (void)memsnap::analyze(loaded);
  } catch (const memsnap::InputError&) {
  }
  return 0;
}
