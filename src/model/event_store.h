// EventStore: keeps the newest N trace events per device (a ring once full). While a snapshot is
// read, the events are handed over in batches to a second thread when the machine has a second
// core, so that writing hundreds of MB of events (and the page faults that come with it) runs
// beside the pickle decoding instead of after it. The same thread pairs each device's allocations
// with their frees as the batches come (EventPairer), until the device's first dropped event.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "model/event_pairing.h"
#include "model/snapshot.h"
#include "read/split_trace.h"

namespace memsnap {

class EventStore {
 public:
  EventStore(Snapshot& snapshot, std::uint64_t max_events_per_device);
  ~EventStore();
  EventStore(const EventStore&) = delete;
  EventStore& operator=(const EventStore&) = delete;

  void add(std::size_t device, const TraceEvent& event) {
    if (!open_ || device != current_->device || current_->count == kBatchEvents) [[unlikely]] start_batch(device);
    current_->events[current_->count++] = event;
    ++entries_[device];
  }
  // The trace split's events (read/split_trace.h) after those added so far, in one hand-over:
  // the worker rewrites them as TraceEvents (their stacks by the tables, a resolved reference as
  // it stands) while the reader reads on.
  struct SplitTables {
    std::vector<StackId> stacks;    // by local stack
    std::vector<StreamId> streams;  // by the split's stream index
    std::vector<Action> actions;    // by the split's action index
  };
  void add_split(std::size_t device, BigVector<SplitEvent>&& events, SplitTables&& tables);
  // Makes device_traces[device] exist even when it holds no events.
  void ensure_device(std::size_t device);
  // Entries added so far for `device` (for messages while reading).
  std::uint64_t entries(std::size_t device) const { return device < entries_.size() ? entries_[device] : 0; }
  // Stores what is pending, stops the worker and puts each device's ring in chronological order.
  // Rethrows what the worker failed with. add() must not be called afterwards.
  void finish();

 private:
  static constexpr std::size_t kBatchEvents = 8192;
  static constexpr std::size_t kQueueDepth = 4;
  struct Batch {
    std::size_t device = 0;
    std::size_t count = 0;
    TraceEvent events[kBatchEvents];
    TraceEvents all;  // add_split's events instead of `events` when not empty
    SplitTables tables;  // how to rewrite them (until stored)
    const TraceEvent* data() const { return all.empty() ? events : all.data(); }
  };
  void start_batch(std::size_t device);
  void hand_over();  // submits current_ (an empty one still creates its device's trace)
  void submit(std::unique_ptr<Batch> batch);
  void store(Batch& batch);  // on the worker (or inline without one)
  void work();

  Snapshot& snap_;
  std::uint64_t max_events_;
  std::vector<std::uint64_t> entries_;
  std::vector<std::size_t> ring_next_;  // per device: next slot to overwrite once full (worker side)
  // Per device (worker side): the pairing of its events so far, null once one was dropped.
  std::vector<std::unique_ptr<EventPairer>> pairers_;
  std::unique_ptr<Batch> current_;
  bool open_ = false;  // current_ holds a batch for current_->device
  bool finished_ = false;

  // Worker state.
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Batch>> full_;
  std::vector<std::unique_ptr<Batch>> empty_;
  bool stop_ = false;
  std::size_t bulk_ = 0;  // add_split batches queued or being stored
  std::exception_ptr error_;
};

}  // namespace memsnap
