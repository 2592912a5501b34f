// The memory mapping behind BigVector: anonymous private mappings, grown with mremap.
#include "base/big_vector.h"

#include <sys/mman.h>
#include <unistd.h>

#include "base/page_prefaulter.h"

namespace memsnap::big_vector_detail {
namespace {
constexpr std::size_t kMappingUnit = std::size_t(2) << 20;
constexpr std::size_t kPrefaultAhead = std::size_t(2) << 20;  // bytes faulted in beyond what is written
}  // namespace

std::size_t prefault_ahead(void* data, std::size_t mapped, std::size_t used, std::size_t requested) {
  static const auto kPage = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));  // madvise takes whole pages
  const std::size_t from = std::max(requested, (used + kPage - 1) / kPage * kPage);
  const std::size_t to = std::min(mapped, (used + kPrefaultAhead) / kPage * kPage);
  if (to <= from) return requested;
  prefault_pages_async(static_cast<char*>(data) + from, to - from);
  return to;
}

std::size_t round_to_mapping(std::size_t bytes) {
  if (bytes > std::size_t(-1) - kMappingUnit) throw std::bad_alloc();
  return std::max(kMappingUnit, (bytes + kMappingUnit - 1) / kMappingUnit * kMappingUnit);
}

void* map_bytes(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

void* remap_bytes(void* old, std::size_t old_bytes, std::size_t new_bytes) {
  void* p = mremap(old, old_bytes, new_bytes, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

void unmap_bytes(void* p, std::size_t bytes) noexcept { munmap(p, bytes); }

}  // namespace memsnap::big_vector_detail
