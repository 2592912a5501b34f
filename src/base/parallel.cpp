// worker_count(): the CPUs in this process's affinity mask (what containers and taskset allow);
// stop_worker().
#include "base/parallel.h"

#include <sched.h>

namespace memsnap {

std::size_t worker_count() {
  static const std::size_t count = [] {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
      const int n = CPU_COUNT(&set);
      if (n > 0) return static_cast<std::size_t>(n);
    }
    return std::max<std::size_t>(1, std::thread::hardware_concurrency());
  }();
  return count;
}

void stop_worker(std::thread& worker, std::mutex& mutex, std::condition_variable& changed, bool& stop) {
  if (!worker.joinable()) return;
  {
    std::lock_guard lock(mutex);
    stop = true;
  }
  changed.notify_all();
  worker.join();
}

}  // namespace memsnap
