// Internal to the reader: what a list of memo references decoded to, found by the list's bytes.
//
// A frames list in device_traces is MARK (BINGET i | LONG_BINGET iiii)... APPENDS, and a trace
// repeats a few thousand distinct lists millions of times (a fresh list per captured traceback,
// naming the same memoized frame dicts). Two lists whose reference bytes are equal name the same
// memo slots, so while none of those slots changes they decode to the same thing: the reader
// finds what a list seen before decoded to from its bytes (a walk over the opcodes, a hash, one
// comparison; for a short list, its first eight bytes and one comparison) instead of resolving
// each reference. It keeps two such caches: the trace's lists'
// stacks (FramesListCache, emptied whenever a memo slot holding a frame is overwritten or dropped,
// Memo::frame_epoch) and, outside the trace, the earlier list with the same items (the blocks'
// frames lists; emptied whenever any memo slot changes, Memo::slot_epoch), so the result is
// exactly what the full decode gives.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/numeric/int128.h>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "read/pickle_opcodes.h"
#include "read/value.h"

namespace memsnap::pickle_vm {

// A run of BINGET / LONG_BINGET opcodes: where it ends, and a hash of its bytes.
struct ReferenceRun {
  const std::uint8_t* end;
  std::uint64_t hash;
};

namespace run_hash {
inline std::uint64_t load64(const std::uint8_t* p) {
  std::uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}
inline std::uint64_t load32(const std::uint8_t* p) {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}
// The 128-bit product of x and y folded to 64 bits (the mixing step of wyhash and absl's hash).
inline std::uint64_t fold(std::uint64_t x, std::uint64_t y) {
  const absl::uint128 m = absl::uint128(x) * y;
  return absl::Uint128Low64(m) ^ absl::Uint128High64(m);
}
inline constexpr std::uint64_t k0 = 0xa0761d6478bd642full, k1 = 0xe7037ed1a0b428dbull, k2 = 0x8ebc6af09c88c6e3ull,
                                   k3 = 0x589965cc75374cc3ull;
}  // namespace run_hash

// The run of BINGET / LONG_BINGET opcodes that starts at d and lies wholly before `end`, hashed on
// the way: four references of one opcode are checked at once (their positions do not depend on
// each other's bytes) and their bytes mixed as two or three words, the rest one by one. Equal
// bytes give equal hashes (the walk depends only on the bytes); unequal ones are told apart by
// ListBytesCache::find.
inline ReferenceRun memo_reference_run(const std::uint8_t* d, const std::uint8_t* end) {
  using namespace run_hash;
  const std::uint8_t* const begin = d;
  std::uint64_t a = k0, b = k1;
  for (;;) {
    const std::ptrdiff_t left = end - d;
    if (left >= 20 && d[0] == op::kLongBinGet && d[5] == op::kLongBinGet && d[10] == op::kLongBinGet &&
        d[15] == op::kLongBinGet) {
      a = fold(a ^ load64(d), load64(d + 8) ^ k2);
      b = fold(b ^ load32(d + 16), k3);
      d += 20;
    } else if (left >= 8 && d[0] == op::kBinGet && d[2] == op::kBinGet && d[4] == op::kBinGet && d[6] == op::kBinGet) {
      a = fold(a ^ load64(d), k2);
      d += 8;
    } else if (left >= 5 && d[0] == op::kLongBinGet) {
      b = fold(b ^ load32(d + 1) ^ (std::uint64_t(5) << 40), k3);
      d += 5;
    } else if (left >= 2 && d[0] == op::kBinGet) {
      b = fold(b ^ d[1] ^ (std::uint64_t(2) << 40), k3);
      d += 2;
    } else {
      return {d, fold(a ^ static_cast<std::uint64_t>(d - begin), b ^ k2)};
    }
  }
}

// kShortLookup: it also keeps, for find_short, the short list last seen with each first eight bytes.
template <class T, bool kShortLookup = false>
class ListBytesCache {
 public:
  // Bounds on what the cache keeps (a trace of real structure needs a few thousand lists).
  static constexpr std::size_t kMaxBytes = std::size_t(16) << 20;
  static constexpr std::size_t kMaxLists = std::size_t(1) << 18;

  // Lists of Python frames are a few dozen bytes, those with C++ frames a few hundred: up to
  // kShort bytes they are compared word by word inline, longer ones by memcmp.
  static constexpr std::size_t kShort = 64;
  // What a list whose reference bytes equal body[0, length) decoded to, or nullptr. With
  // kShortLookup, `limit` is the end of what is readable from body, and a hit also becomes the
  // list find_short tries first for lists that begin with body's first eight bytes.
  T* find(const std::uint8_t* body, std::size_t length, std::uint64_t h, const std::uint8_t* limit = nullptr) {
    const auto it = index_.find(h);
    if (it == index_.end()) return nullptr;
    Entry& e = entries_[it->second];
    if (e.length != length || !same_bytes(bytes_.data() + e.offset, body, length)) return nullptr;
    note_recent(body, limit, it->second);
    return &e.value;
  }
  // Remembers what body[0, length) decoded to; a hash taken by another list, or a full cache,
  // keeps what is there. `limit` as for find.
  void insert(const std::uint8_t* body, std::size_t length, std::uint64_t h, const T& value, const std::uint8_t* limit = nullptr) {
    if (bytes_.size() + length > kMaxBytes || entries_.size() >= kMaxLists) return forget_last();
    const auto [it, inserted] = index_.try_emplace(h, static_cast<std::uint32_t>(entries_.size()));
    if (!inserted) return forget_last();
    entries_.push_back({static_cast<std::uint32_t>(bytes_.size()), static_cast<std::uint32_t>(length), value});
    bytes_.insert(bytes_.end(), body, body + length);
    note_recent(body, limit, it->second);
  }
  // A short list (at most kShort bytes) found without walking or hashing it: the short list last
  // found or remembered with body's first eight bytes, when its bytes equal body's and an APPENDS
  // follows them before `limit`. Equal bytes up to that APPENDS are the same run of references
  // (the walk depends only on the bytes, and stops at the APPENDS), so this finds only what find
  // would. nullptr otherwise; `length` is then untouched.
  T* find_short(const std::uint8_t* body, const std::uint8_t* limit, std::size_t& length)
    requires kShortLookup
  {
    if (limit - body < 8) return nullptr;
    const std::uint32_t slot = recent_[recent_slot(body)];
    if (slot == 0 || !equal_list_at(entries_[slot - 1], body, limit)) return nullptr;
    follow(slot - 1);
    length = entries_[slot - 1].length;
    return &entries_[slot - 1].value;
  }
  // The list that followed the one found or remembered last, the last time that one was found
  // (a trace repeats its sequence of stacks each step), when its bytes equal body's and an APPENDS
  // follows them before `limit`: found without walking or hashing, long lists included, and only
  // what find would find (see find_short). nullptr otherwise; `length` is then untouched.
  T* find_next(const std::uint8_t* body, const std::uint8_t* limit, std::size_t& length)
    requires kShortLookup
  {
    if (last_ == 0) return nullptr;
    const std::uint32_t slot = entries_[last_ - 1].next;
    if (slot == 0 || !equal_list_at(entries_[slot - 1], body, limit)) return nullptr;
    last_ = slot;
    length = entries_[slot - 1].length;
    return &entries_[slot - 1].value;
  }
  // Empties the cache when the memo's epoch is no longer the one its lists were read at.
  void keep_for(std::uint64_t epoch) {
    if (epoch == epoch_) return;
    index_.clear();
    entries_.clear();
    bytes_.clear();
    recent_.fill(0);
    last_ = 0;
    epoch_ = epoch;
  }

 private:
  // a[0, n) == b[0, n): short lists by 8-byte words (the last overlapping), without a call.
  static bool same_bytes(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
    using run_hash::load64;
    if (n < 8 || n > kShort) return std::memcmp(a, b, n) == 0;
    for (std::size_t k = 0; k + 8 <= n; k += 8) {
      if (load64(a + k) != load64(b + k)) return false;
    }
    return load64(a + n - 8) == load64(b + n - 8);
  }
  static constexpr unsigned kRecentBits = 10;
  static std::size_t recent_slot(const std::uint8_t* body) { return (run_hash::load64(body) * run_hash::k0) >> (64 - kRecentBits); }
  // Only short lists: long ones (C++ frames) share their first bytes (the allocator's own
  // frames) with many others, so their slot would rarely name the list that follows.
  void note_recent(const std::uint8_t* body, const std::uint8_t* limit, std::uint32_t index) {
    if constexpr (kShortLookup) {
      if (limit && limit - body >= 8 && entries_[index].length <= kShort) recent_[recent_slot(body)] = index + 1;
      follow(index);
    }
  }
  // The list read now is not in the cache: no entry is followed by the next one.
  void forget_last() { last_ = 0; }
  // Entry `index` is the list found or remembered now: the one before it is followed by it.
  void follow(std::uint32_t index) {
    if (last_ != 0) entries_[last_ - 1].next = index + 1;
    last_ = index + 1;
  }
  struct Entry {
    std::uint32_t offset;
    std::uint32_t length;
    T value;
    std::uint32_t next = 0;  // with kShortLookup: the entry (index + 1) that followed this one last
  };
  // e's bytes equal body's and an APPENDS follows them before limit.
  bool equal_list_at(const Entry& e, const std::uint8_t* body, const std::uint8_t* limit) const {
    return static_cast<std::ptrdiff_t>(e.length) < limit - body && body[e.length] == op::kAppends &&
           same_bytes(bytes_.data() + e.offset, body, e.length);
  }
  // By a list's first eight bytes: the entry (index + 1) last found or remembered with them, 0: none.
  std::array<std::uint32_t, kShortLookup ? std::size_t(1) << kRecentBits : 0> recent_{};
  absl::flat_hash_map<std::uint64_t, std::uint32_t> index_;
  std::vector<Entry> entries_;
  std::vector<std::uint8_t> bytes_;
  std::uint32_t last_ = 0;  // with kShortLookup: the entry (index + 1) found or remembered last, 0: none
  std::uint64_t epoch_ = 0;
};

// The trace's frames lists: their stacks (interned values), and the memo value entry holding the
// stack once a list was memoized (0 before), so that memoizing an equal list again pushes a slot
// naming that entry (an interned value's entry is never overwritten: Memo::restore).
struct CachedStack {
  Value stack;
  std::uint32_t memo_entry = 0;
};
using FramesListCache = ListBytesCache<CachedStack, true>;

// A list outside the trace: the container read first with these items, and its size then (a
// list is only ever appended to, so an unchanged size means unchanged items).
struct EarlierList {
  std::uint64_t index;
  std::uint32_t size;
};
using ReferenceListCache = ListBytesCache<EarlierList>;

}  // namespace memsnap::pickle_vm
