// Internal to the trace split (trace_split.cpp): where a split thread starts, and the memo
// size the reader will have there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "read/pickle_vm.h"

namespace memsnap::pickle_vm {

// A batch start at or after `from` (APPENDS [FRAME] MARK EMPTY_DICT MEMOIZE MARK, within 4 MiB):
// the MARK's offset.
std::optional<std::size_t> find_batch_start(const std::uint8_t* data, std::size_t size, std::size_t from);

// The memo size the reader will have at `start` (a batch MARK of a trace list), from the entries
// after it; `memo` is the reader's memo as copied (keys resolve through it, `sink` names them).
struct MemoBase {
  std::size_t base = 0;
  std::size_t entry_bytes = 0;  // the bytes an entry, on average, of those walked to learn it
};
std::optional<MemoBase> learn_memo_base(const std::uint8_t* data, std::size_t size, std::size_t start, const Memo& memo,
                                        TraceEntrySink& sink);

}  // namespace memsnap::pickle_vm
