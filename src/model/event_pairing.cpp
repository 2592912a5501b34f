// EventPairer: the forward pass that pairs allocations with their frees (see the header).
#include "model/event_pairing.h"

#include <algorithm>
#include <utility>

namespace memsnap {

bool is_segment_action(Action a) {
  return a == Action::SegmentAlloc || a == Action::SegmentFree || a == Action::SegmentMap || a == Action::SegmentUnmap;
}

void EventPairer::close_run() {
  if (run_.size() >= kMinBurstFrees) {
    p_.free_bursts.lifetimes.insert(p_.free_bursts.lifetimes.end(), run_.begin(), run_.end());
    p_.free_bursts.ends.push_back(p_.free_bursts.lifetimes.size());
  }
  run_.clear();
}

// Event k's delta into the live sums (k: its index among all the events added).
[[gnu::always_inline]] inline void EventPairer::add_live(const TraceEvent& e, std::size_t k) {
  LiveSums& l = p_.live;
  if (k % kCurveStride == 0) {
    if (k > 0) {
      l.block_max.push_back(block_high_);
      l.block_min.push_back(block_low_);
    }
    l.checkpoints.push_back(l.total);
    block_high_ = std::numeric_limits<std::int64_t>::min();
    block_low_ = std::numeric_limits<std::int64_t>::max();
  }
  if (!l.exact) return;
  if (e.action == Action::Alloc || e.action == Action::FreeCompleted) {
    constexpr auto kMaxSize = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    const bool fits = e.size <= kMaxSize;
    const auto size = static_cast<std::int64_t>(e.size);
    const bool overflow = e.action == Action::Alloc ? __builtin_add_overflow(l.total, size, &l.total)
                                                    : __builtin_sub_overflow(l.total, size, &l.total);
    if (!fits || overflow) {
      l.exact = false;
      return;
    }
  }
  if (l.total >= l.max) {  // also after an event that changes nothing: the latest state wins
    l.max = l.total;
    l.max_index = k + 1;
  }
  l.min = std::min(l.min, l.total);
  block_high_ = std::max(block_high_, l.total);
  block_low_ = std::min(block_low_, l.total);
}

// Each free_completed closes the open alloc of its address (the nearest in time).
void EventPairer::add(const TraceEvent* events, std::size_t count) {
  auto& lifetimes = p_.lifetimes;
  for (std::size_t i = 0; i < count; ++i) {
    const TraceEvent& e = events[i];
    const std::size_t k = p_.events + i;
    add_live(e, k);
    ++p_.actions[static_cast<std::size_t>(e.action)];
    if (implausible_size(e) && p_.first_huge_size == TraceScan::kNone) [[unlikely]] {
      p_.first_huge_size = k;
    }
    if (implausible_time(e) && p_.first_bad_time == TraceScan::kNone) [[unlikely]] {
      p_.first_bad_time = k;
    }
    if (!e.has_time || e.time_us < last_time_) p_.times_ascending = false;
    last_time_ = e.time_us;
    if (e.action == Action::Alloc) {
      close_run();
      auto [it, inserted] = p_.open.try_emplace(e.addr, EventPairs::Open{lifetimes.size(), 0});
      if (!inserted) {  // an inconsistent trace reuses a live address: end the old lifetime here
        lifetimes[it->second.lifetime].free = static_cast<EventIndex>(k);
        it->second = {lifetimes.size(), 0};
      }
      lifetimes.push_back({static_cast<EventIndex>(k), kStillLive, e.size, e.stack, kNoStack});
    } else if (e.action == Action::FreeRequested) {
      if (auto it = p_.open.find(e.addr); it != p_.open.end()) it->second.requested = k + 1;
      else p_.orphan_requests[e.addr] = k;
    } else if (is_segment_action(e.action)) {
      p_.segment_events.push_back(k);
    } else if (e.action == Action::Oom) {
      p_.oom_events.push_back(k);
    } else if (e.action == Action::FreeCompleted) {
      if (auto it = p_.open.find(e.addr); it != p_.open.end()) {
        Lifetime& l = lifetimes[it->second.lifetime];
        l.free = static_cast<EventIndex>(k);
        l.free_stack = e.stack;
        run_.push_back(it->second.lifetime);
        p_.open.erase(it);
        ++p_.matched_frees;
      } else {
        p_.orphan_requests.erase(e.addr);
        lifetimes.push_back({kBeforeWindow, static_cast<EventIndex>(k), e.size, kNoStack, e.stack});
        ++p_.frees_before_window;
        p_.bytes_freed_before_window += e.size;
      }
    }
  }
  p_.events += count;
}

EventPairs EventPairer::finish() {
  close_run();
  LiveSums& l = p_.live;
  if (p_.events % kCurveStride == 0) l.checkpoints.push_back(l.total);  // the point after the last event
  if (p_.events > 0) {  // the last block, full or not
    l.block_max.push_back(block_high_);
    l.block_min.push_back(block_low_);
  }
  last_time_ = std::numeric_limits<std::int64_t>::min();
  return std::exchange(p_, EventPairs{});
}

PairsHandOver::~PairsHandOver() { drop(); }

PairsHandOver& PairsHandOver::operator=(const PairsHandOver& other) {
  if (this != &other) drop();
  return *this;
}

PairsHandOver& PairsHandOver::operator=(PairsHandOver&& other) noexcept {
  if (this != &other) put(other.take());
  return *this;
}

std::unique_ptr<EventPairs> PairsHandOver::take() const { return std::unique_ptr<EventPairs>(pairs_.exchange(nullptr)); }

void PairsHandOver::drop() { delete pairs_.exchange(nullptr); }

void PairsHandOver::put(std::unique_ptr<EventPairs> pairs) { delete pairs_.exchange(pairs.release()); }

EventPairs pair_all(const TraceEvents& events) {
  EventPairer pairer;
  pairer.add(events.data(), events.size());
  return pairer.finish();
}

}  // namespace memsnap
