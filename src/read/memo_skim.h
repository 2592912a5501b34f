// Internal to the trace split: the memo as it will stand at the trace's first batch end, learned
// by walking the opcodes before it without building any value, so that split threads can start
// while the reader still decodes the segments (trace_split.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "read/value.h"

namespace memsnap::pickle_vm {

struct MemoSkim {
  std::size_t trace = 0;  // the `device_traces` key's SHORT_BINUNICODE
  std::size_t end = 0;    // the walk's end: the MARK of the trace's second batch
  std::size_t puts = 0;   // memo slots written before `end` (MEMOIZE only)
  // The strs memoized before `end` (the trace's keys among them), by slot; Values into `data`.
  std::vector<std::pair<std::size_t, Value>> strs;
};

// Walks a protocol 4+ pickle from its start to the trace's second batch (the first batch start,
// APPENDS MARK EMPTY_DICT MEMOIZE MARK, after the `device_traces` key), counting memo puts and
// noting the strs they memoize. nullopt at anything the walk does not follow exactly as the
// reader would count it: an explicit memo put (BINPUT), an opcode that is not plain data, no
// trace within the first `max_bytes`, a batch start that is not at an opcode, more than
// kMaxSkimmedStrs strs (a few thousand in real files), or `stop` set (checked every MiB).
inline constexpr std::size_t kMaxSkimmedStrs = std::size_t(1) << 18;
std::optional<MemoSkim> skim_memo_to_trace(const std::uint8_t* data, std::size_t size, std::size_t max_bytes,
                                           const std::atomic<bool>& stop);

}  // namespace memsnap::pickle_vm
