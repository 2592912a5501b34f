// Internal to the reader: what a list of memo references decoded to, found by the list's bytes.
//
// A frames list in device_traces is MARK (BINGET i | LONG_BINGET iiii)... APPENDS, and a trace
// repeats a few thousand distinct lists millions of times (a fresh list per captured traceback,
// naming the same memoized frame dicts). Two lists whose reference bytes are equal name the same
// memo slots, so while none of those slots changes they decode to the same thing: the reader
// finds what a list seen before decoded to from its bytes (a walk over the opcodes, a hash, one
// comparison) instead of resolving each reference. It keeps two such caches: the trace's lists'
// stacks (FramesListCache, emptied whenever a memo slot holding a frame is overwritten or dropped,
// Memo::frame_epoch) and, outside the trace, the earlier list with the same items (the blocks'
// frames lists; emptied whenever any memo slot changes, Memo::slot_epoch), so the result is
// exactly what the full decode gives.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/hash/hash.h>
#include <absl/types/span.h>
#include <cstdint>
#include <cstring>
#include <vector>

#include "read/pickle_opcodes.h"
#include "read/value.h"

namespace memsnap::pickle_vm {

// The end of the run of BINGET / LONG_BINGET opcodes that starts at d and lies wholly before
// `end`: four references of one opcode are checked at once (their positions do not depend on
// each other's bytes), the rest one by one.
inline const std::uint8_t* memo_reference_run_end(const std::uint8_t* d, const std::uint8_t* end) {
  for (;;) {
    const std::ptrdiff_t left = end - d;
    if (left >= 20 && d[0] == op::kLongBinGet && d[5] == op::kLongBinGet && d[10] == op::kLongBinGet &&
        d[15] == op::kLongBinGet) {
      d += 20;
    } else if (left >= 8 && d[0] == op::kBinGet && d[2] == op::kBinGet && d[4] == op::kBinGet && d[6] == op::kBinGet) {
      d += 8;
    } else if (left >= 5 && d[0] == op::kLongBinGet) {
      d += 5;
    } else if (left >= 2 && d[0] == op::kBinGet) {
      d += 2;
    } else {
      return d;
    }
  }
}

template <class T>
class ListBytesCache {
 public:
  // Bounds on what the cache keeps (a trace of real structure needs a few thousand lists).
  static constexpr std::size_t kMaxBytes = std::size_t(16) << 20;
  static constexpr std::size_t kMaxLists = std::size_t(1) << 18;

  static std::uint64_t hash(const std::uint8_t* body, std::size_t length) {
    return absl::HashOf(absl::MakeConstSpan(body, length));  // LowLevelHash, many bytes a step
  }
  // What a list whose reference bytes equal body[0, length) decoded to, or nullptr.
  const T* find(const std::uint8_t* body, std::size_t length, std::uint64_t h) const {
    const auto it = index_.find(h);
    if (it == index_.end()) return nullptr;
    const Entry& e = entries_[it->second];
    if (e.length != length || std::memcmp(bytes_.data() + e.offset, body, length) != 0) return nullptr;
    return &e.value;
  }
  // Remembers what body[0, length) decoded to; a hash taken by another list, or a full cache,
  // keeps what is there.
  void insert(const std::uint8_t* body, std::size_t length, std::uint64_t h, const T& value) {
    if (bytes_.size() + length > kMaxBytes || entries_.size() >= kMaxLists) return;
    const auto [it, inserted] = index_.try_emplace(h, static_cast<std::uint32_t>(entries_.size()));
    if (!inserted) return;
    entries_.push_back({static_cast<std::uint32_t>(bytes_.size()), static_cast<std::uint32_t>(length), value});
    bytes_.insert(bytes_.end(), body, body + length);
  }
  // Empties the cache when the memo's epoch is no longer the one its lists were read at.
  void keep_for(std::uint64_t epoch) {
    if (epoch == epoch_) return;
    index_.clear();
    entries_.clear();
    bytes_.clear();
    epoch_ = epoch;
  }

 private:
  struct Entry {
    std::uint32_t offset;
    std::uint32_t length;
    T value;
  };
  absl::flat_hash_map<std::uint64_t, std::uint32_t> index_;
  std::vector<Entry> entries_;
  std::vector<std::uint8_t> bytes_;
  std::uint64_t epoch_ = 0;
};

// The trace's frames lists: their stacks (interned values).
using FramesListCache = ListBytesCache<Value>;

// A list outside the trace: the container read first with these items, and its size then (a
// list is only ever appended to, so an unchanged size means unchanged items).
struct EarlierList {
  std::uint64_t index;
  std::uint32_t size;
};
using ReferenceListCache = ListBytesCache<EarlierList>;

}  // namespace memsnap::pickle_vm
