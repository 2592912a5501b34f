// The background thread behind prefault_pages_async (see the header).
#include "base/page_prefaulter.h"

#include <sys/mman.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "base/parallel.h"

namespace memsnap {
namespace {

#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23;  // Linux 5.14
#endif
constexpr std::size_t kMaxPending = 64;  // requests beyond this are dropped, never waited for

// Whether the kernel knows MADV_POPULATE_WRITE (EINVAL on older ones).
bool kernel_populates() {
  const std::size_t bytes = 4096;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool ok = madvise(p, bytes, kPopulateWrite) == 0;
  munmap(p, bytes);
  return ok;
}

class Prefaulter {
 public:
  Prefaulter() {
    if (worker_count() > 1 && kernel_populates()) worker_ = std::thread([this] { work(); });
  }
  ~Prefaulter() { stop_worker(worker_, mutex_, changed_, stop_); }

  void request(void* begin, std::size_t bytes) {
    if (!worker_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      if (pending_.size() >= kMaxPending) return;
      pending_.emplace_back(begin, bytes);
    }
    changed_.notify_one();
  }

 private:
  void work() {
    for (;;) {
      std::pair<void*, std::size_t> range;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        if (stop_) return;
        range = pending_.front();
        pending_.pop_front();
      }
      madvise(range.first, range.second, kPopulateWrite);  // a failure (range gone) is ignored
    }
  }

  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<void*, std::size_t>> pending_;
  bool stop_ = false;
};

}  // namespace

void prefault_pages_async(void* begin, std::size_t bytes) {
  static Prefaulter prefaulter;
  prefaulter.request(begin, bytes);
}

}  // namespace memsnap
