// EventStore: batches of trace events, stored per device on a worker thread (see the header).
#include "model/event_store.h"

#include "base/phase_timer.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "base/error.h"
#include "base/limits.h"
#include "base/parallel.h"

namespace memsnap {
namespace {
constexpr std::size_t kMaxDevices = 4096;
}  // namespace

EventStore::EventStore(Snapshot& snapshot, std::uint64_t max_events_per_device)
    : snap_(snapshot), max_events_(std::clamp<std::uint64_t>(max_events_per_device, 1, limits::kMaxKeptEventsPerDevice)), current_(std::make_unique<Batch>()) {
  if (worker_count() > 1) worker_ = std::thread([this] { work(); });
}

EventStore::~EventStore() { stop_worker(worker_, mutex_, changed_, stop_); }

void EventStore::ensure_device(std::size_t device) {
  start_batch(device);  // an empty batch for `device` creates its trace
}

void EventStore::start_batch(std::size_t device) {
  if (device >= kMaxDevices) {
    throw InputError(fmt::format("device_traces lists {} devices, more than memsnap's limit of {}", device + 1, kMaxDevices),
                     kRecaptureRemedy);
  }
  if (device >= entries_.size()) entries_.resize(device + 1, 0);
  if (open_) hand_over();
  current_->device = device;
  current_->count = 0;
  open_ = true;
}

void EventStore::add_split(std::size_t device, BigVector<SplitEvent>&& events, SplitTables&& tables) {
  if (events.empty()) return;
  start_batch(device);
  static_assert(sizeof(SplitEvent) == sizeof(TraceEvent));
  current_->all = std::move(events).rebind<TraceEvent>();  // rewritten by store()
  current_->tables = std::move(tables);
  current_->count = current_->all.size();
  entries_[device] += current_->count;
  hand_over();
}

namespace {

// The split's events rewritten in place as the TraceEvents the reader would have stored.
void rewrite_split_events(TraceEvents& events, const EventStore::SplitTables& tables) {
  for (TraceEvent& slot : events) {
    SplitEvent se;
    std::memcpy(static_cast<void*>(&se), &slot, sizeof se);
    TraceEvent e;
    e.addr = se.addr;
    e.size = se.size;
    e.time_us = se.time_us;
    e.has_time = se.has_time;
    e.action = tables.actions[se.action];
    e.stream_id = tables.streams[se.stream];
    e.stack = se.stack == SplitTrace::kNoStack                               ? kNoStack
              : (se.stack & SplitTrace::kResolved) == SplitTrace::kResolved ? se.stack & SplitTrace::kIndex
                                                                             : tables.stacks[se.stack];
    std::memcpy(&slot, &e, sizeof e);
  }
}

}  // namespace

void EventStore::hand_over() {
  std::unique_ptr<Batch> next;
  if (worker_.joinable()) {
    std::lock_guard lock(mutex_);
    if (!empty_.empty()) {
      next = std::move(empty_.back());
      empty_.pop_back();
    }
  }
  if (!next) next = std::make_unique<Batch>();
  submit(std::move(current_));
  current_ = std::move(next);
  open_ = false;
}

void EventStore::submit(std::unique_ptr<Batch> batch) {
  if (!worker_.joinable()) {
    store(*batch);
    return;
  }
  std::unique_lock lock(mutex_);
  // Behind a split's events (millions in one batch) the reader does not wait: its batches queue up.
  changed_.wait(lock, [&] { return full_.size() < kQueueDepth || bulk_ > 0 || error_; });
  if (error_) std::rethrow_exception(error_);
  if (!batch->all.empty()) ++bulk_;
  full_.push_back(std::move(batch));
  lock.unlock();
  changed_.notify_all();
}

void EventStore::work() {
  for (;;) {
    std::unique_ptr<Batch> batch;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return !full_.empty() || stop_; });
      if (full_.empty()) return;
      batch = std::move(full_.front());
      full_.pop_front();
    }
    changed_.notify_all();
    try {
      if (!error_) store(*batch);
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
    }
    const bool bulk = !batch->all.empty();
    batch->all = TraceEvents();
    batch->tables = SplitTables();
    {
      std::lock_guard lock(mutex_);
      if (bulk) --bulk_;
      empty_.push_back(std::move(batch));
    }
    changed_.notify_all();
  }
}

// Only this function (on the worker while reading) changes snap_.device_traces until finish().
void EventStore::store(Batch& batch) {
  if (!batch.tables.actions.empty()) {
    rewrite_split_events(batch.all, batch.tables);
    batch.tables = SplitTables();
  }
  if (batch.device >= snap_.device_traces.size()) {
    snap_.device_traces.resize(batch.device + 1);
    ring_next_.resize(batch.device + 1, 0);
    pairers_.resize(batch.device + 1);
  }
  DeviceTrace& trace = snap_.device_traces[batch.device];
  std::unique_ptr<EventPairer>& pairer = pairers_[batch.device];
  if (trace.total == 0) pairer = std::make_unique<EventPairer>();
  trace.total += batch.count;
  std::size_t k = 0;
  const TraceEvent* events = batch.data();
  if (trace.events.size() < max_events_) {
    k = std::min<std::size_t>(batch.count, max_events_ - trace.events.size());
    trace.events.append(events, k);
    if (pairer) pairer->add(events, k);
  }
  if (k < batch.count) pairer.reset();  // the window moves: the analysis pairs what is kept
  std::size_t& next = ring_next_[batch.device];
  for (; k < batch.count; ++k) {
    trace.events[next] = events[k];
    next = (next + 1) % trace.events.size();
    ++trace.dropped;
  }
}

void EventStore::finish() {
  if (finished_) return;
  finished_ = true;
  if (open_) hand_over();
  if (worker_.joinable()) {
    const PhaseTimer timer("read: waited for the event store's worker");
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return full_.empty() || error_; });
    }
    stop_worker(worker_, mutex_, changed_, stop_);
    if (error_) std::rethrow_exception(error_);
  }
  for (std::size_t d = 0; d < snap_.device_traces.size(); ++d) {
    auto& events = snap_.device_traces[d].events;
    std::rotate(events.begin(), events.begin() + static_cast<std::ptrdiff_t>(ring_next_[d]), events.end());
    if (pairers_[d]) {
      auto pairs = std::make_unique<EventPairs>(pairers_[d]->finish());
      snap_.device_traces[d].scan = {pairs->events, pairs->first_huge_size, pairs->first_bad_time};
      snap_.device_traces[d].pairs.put(std::move(pairs));
    }
    pairers_[d].reset();
  }
}

}  // namespace memsnap
