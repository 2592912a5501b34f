// parallel_for: runs independent tasks on the machine's cores (the calling thread included), so
// the per-device and per-pass stages of the analysis use a second core when there is one.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace memsnap {

// Threads worth starting: the CPUs this process may run on (at least 1).
std::size_t worker_count();

// Stops a background worker that waits on `changed` until `stop` is set: sets it under `mutex`,
// wakes the worker and joins it. Nothing when the worker does not run.
void stop_worker(std::thread& worker, std::mutex& mutex, std::condition_variable& changed, bool& stop);

// Calls fn(i) once for every i in [0, n), in any order and on up to worker_count() threads.
// The first exception thrown by a task is rethrown here after every thread has finished.
template <typename Fn>
void parallel_for(std::size_t n, Fn&& fn) {
  const std::size_t threads = std::min(n, worker_count());
  if (threads <= 1) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace memsnap
