// The memory mapping behind BigVector: anonymous private mappings, grown with mremap, with
// transparent huge pages requested when the vector asks for them.
#include "base/big_vector.h"

#include <sys/mman.h>

namespace memsnap::big_vector_detail {
namespace {
constexpr std::size_t kHugePage = std::size_t(2) << 20;

void advise_huge_pages(void* p, std::size_t bytes) {
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);  // advice only: without THP the mapping still works
#else
  (void)p;
  (void)bytes;
#endif
}
}  // namespace

std::size_t round_to_mapping(std::size_t bytes) {
  if (bytes > std::size_t(-1) - kHugePage) throw std::bad_alloc();
  return std::max(kHugePage, (bytes + kHugePage - 1) / kHugePage * kHugePage);
}

void* map_bytes(std::size_t bytes, bool huge_pages) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  if (huge_pages) advise_huge_pages(p, bytes);
  return p;
}

void* remap_bytes(void* old, std::size_t old_bytes, std::size_t new_bytes, bool huge_pages) {
  void* p = mremap(old, old_bytes, new_bytes, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) throw std::bad_alloc();
  if (huge_pages) advise_huge_pages(p, new_bytes);
  return p;
}

void unmap_bytes(void* p, std::size_t bytes) noexcept { munmap(p, bytes); }

}  // namespace memsnap::big_vector_detail
