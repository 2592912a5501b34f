// The memory mapping behind BigVector: anonymous private mappings, 2 MiB-aligned, grown with
// mremap, on transparent huge pages once they hold a few MiB.
#include "base/big_vector.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "base/page_prefaulter.h"

namespace memsnap::big_vector_detail {
namespace {
constexpr std::size_t kMappingUnit = std::size_t(2) << 20;  // also the huge page size on x86-64 and arm64 (4 KiB base pages)
constexpr std::size_t kPrefaultAhead = std::size_t(2) << 20;  // bytes faulted in beyond what is written

// An address range of `bytes` aligned to kMappingUnit, reserved without access, for a mapping put
// there with MAP_FIXED / MREMAP_FIXED: a huge page backs only an aligned 2 MiB.
void* reserve_aligned(std::size_t bytes) {
  const std::size_t span = bytes + kMappingUnit;
  void* p = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t aligned = (start + kMappingUnit - 1) / kMappingUnit * kMappingUnit;
  if (aligned > start) munmap(p, aligned - start);
  const std::uintptr_t end = start + span;
  if (end > aligned + bytes) munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  return reinterpret_cast<void*>(aligned);
}

// Huge pages for a mapping of at least kHugeFrom bytes (see the header): a hint, whose failure
// (no THP in this kernel) changes nothing.
void advise_huge(void* p, std::size_t bytes) {
  if (bytes >= kHugeFrom) madvise(p, bytes, MADV_HUGEPAGE);
}

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
  void* at = reserve_aligned(bytes);
  void* p = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) {
    munmap(at, bytes);
    throw std::bad_alloc();
  }
  advise_huge(p, bytes);
  return p;
}

// The pages move with their page tables, huge ones whole: the new range is aligned as well.
void* remap_bytes(void* old, std::size_t old_bytes, std::size_t new_bytes) {
  void* at = reserve_aligned(new_bytes);
  void* p = mremap(old, old_bytes, new_bytes, MREMAP_MAYMOVE | MREMAP_FIXED, at);
  if (p == MAP_FAILED) {
    munmap(at, new_bytes);
    throw std::bad_alloc();
  }
  advise_huge(p, new_bytes);
  return p;
}

void unmap_bytes(void* p, std::size_t bytes) noexcept { munmap(p, bytes); }

}  // namespace memsnap::big_vector_detail
