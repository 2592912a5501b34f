// The allocator layout of one device at an earlier moment: the final segments and live blocks
// with later trace events undone, exactly like memory_viz's "Allocator State History"
// (spec §11.1). Shared by the OOM analysis and the HTML report's segment maps.
#pragma once

#include <cstdint>
#include <algorithm>
#include <iterator>
#include <map>
#include <vector>

#include "base/address_map.h"
#include "model/snapshot.h"

namespace memsnap {

// a + b, saturating instead of wrapping (addresses in broken traces can be anything).
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b);

class LayoutReplay {
 public:
  // One reserved address range [start, end).
  struct Range {
    std::uint64_t end = 0;
    std::int64_t stream = 0;
    bool is_large = true;
  };
  // A live (allocated or pending-free) block: requested bytes and the bytes it occupies.
  struct Live {
    std::uint64_t requested = 0;
    std::uint64_t occupied = 0;
    StackId stack = kNoStack;
  };

  LayoutReplay(const Snapshot& snapshot, std::int64_t device);
  // Undoes the kept events with index >= `index` (only moves backwards).
  void undo_from(std::size_t index);
  bool has_events() const { return !events_->empty(); }

  const std::map<std::uint64_t, Range>& segments() const { return segs_; }
  std::uint64_t reserved() const;
  std::uint64_t allocated() const;  // requested bytes of the live blocks

  // Calls fn(segment_start, range, piece_begin, piece_end, live) for each piece of each segment
  // in address order; `live` is null for a free gap.
  template <typename Fn>
  void for_each_piece(Fn&& fn) const {
    const auto live = sorted_live();
    for (const auto& [start, r] : segs_) {
      std::uint64_t cursor = start;
      auto it = std::lower_bound(live.begin(), live.end(), start, [](const auto& b, std::uint64_t a) { return b.first < a; });
      if (it != live.begin()) {
        const auto prev = std::prev(it);
        cursor = std::max(cursor, std::min(r.end, saturating_add(prev->first, prev->second.occupied)));
      }
      for (; it != live.end() && it->first < r.end; ++it) {
        if (it->first > cursor) fn(start, r, cursor, it->first, static_cast<const Live*>(nullptr));
        const std::uint64_t from = std::max(cursor, it->first);
        const std::uint64_t to = std::min(r.end, saturating_add(it->first, it->second.occupied));
        if (to > from) fn(start, r, from, to, &it->second);
        cursor = std::max(cursor, to);
      }
      if (r.end > cursor) fn(start, r, cursor, r.end, static_cast<const Live*>(nullptr));
    }
  }

 private:
  void undo(const TraceEvent& e);
  void restore_segment(const TraceEvent& e, bool merge);
  bool guess_large(std::uint64_t addr, std::uint64_t size) const;
  void insert_range(std::uint64_t addr, const Range& r);
  void carve(std::uint64_t begin, std::uint64_t end);

  const TraceEvents* events_ = nullptr;
  const std::vector<std::int64_t>* streams_ = nullptr;  // Snapshot::streams
  std::size_t cursor_ = 0;  // events [cursor_, size) are undone
  std::map<std::uint64_t, Range> final_;  // the final segments, for the pool of restored ranges
  std::map<std::uint64_t, Range> segs_;
  // Live blocks by address, unordered while replaying (O(1) per undo); sorted when pieces are
  // needed.
  AddressMap<Live> live_;
  std::vector<std::pair<std::uint64_t, Live>> sorted_live() const;
};

}  // namespace memsnap
