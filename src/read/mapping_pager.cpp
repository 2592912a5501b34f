// MappingPager: release-behind and map-ahead for a file mapping read once (see the header).
#include "read/mapping_pager.h"

#include <algorithm>
#include <sys/mman.h>
#include <unistd.h>

#include "base/parallel.h"

namespace memsnap {
namespace {
constexpr std::size_t kAhead = 2 * MappingPager::kStep;  // mapped in advance of the reader
}  // namespace

MappingPager::MappingPager(const std::uint8_t* data, std::size_t size, std::size_t from, bool own_thread)
    : data_(data),
      size_(size),
      page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))),
      behind_(own_thread ? kStep / 2 : kStep / 4) {
  released_upto_ = populated_upto_ = (from + page_ - 1) / page_ * page_;
  if (own_thread && worker_count() > 1 && size_ > kAhead) worker_ = std::thread([this] { work(); });
}

MappingPager::~MappingPager() { stop_worker(worker_, mutex_, changed_, stop_); }

void MappingPager::advance(std::size_t pos) {
  if (!worker_.joinable()) {
    release_before(pos);  // no second core: the reader's own page faults map the rest
    return;
  }
  {
    std::lock_guard lock(mutex_);
    target_ = pos;
  }
  changed_.notify_one();
}

void MappingPager::work() {
  std::size_t done = ~std::size_t(0);
  for (;;) {
    std::size_t pos;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || target_ != done; });
      if (stop_) return;
      pos = done = target_;
    }
    populate_after(pos);
    release_before(pos);
  }
}

void MappingPager::release_before(std::size_t pos) {
  if (pos < behind_) return;
  const std::size_t keep_from = (pos - behind_) / page_ * page_;
  if (keep_from <= released_upto_) return;
  madvise(const_cast<std::uint8_t*>(data_) + released_upto_, keep_from - released_upto_, MADV_DONTNEED);
  released_upto_ = keep_from;
}

void MappingPager::populate_after(std::size_t pos) {
  // Page-aligned: madvise refuses (EINVAL) a range that starts inside a page.
  const std::size_t from = std::max(populated_upto_, pos) / page_ * page_;
  const std::size_t to = std::min(size_, pos + kAhead);
  if (to <= from) return;
#ifdef MADV_POPULATE_READ
  madvise(const_cast<std::uint8_t*>(data_) + from, to - from, MADV_POPULATE_READ);  // maps them in one call
#endif
  // Then one byte of each page is read here (on older kernels that also maps it). Mapped is not
  // yet cheap to read on a VM whose hypervisor keeps shadow page tables: the first access to each
  // page traps to it (about 2 us a page measured, bench/README.md §19), and the reader would
  // take that trap on every fourth KiB of the file. Taken here, it costs the reader nothing.
  volatile std::uint8_t sink = 0;
  for (std::size_t p = from; p < to; p += page_) sink = sink + data_[p];
  populated_upto_ = to;
}

}  // namespace memsnap
