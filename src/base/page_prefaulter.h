// prefault_pages_async: asks a background thread to fault in (zero-fill) the pages of an
// anonymous writable range before its owner writes them, so that a growing BigVector's page
// faults (4-6 us each on a VM) are taken beside the reader instead of on it. Only a hint: with
// one core, on kernels without MADV_POPULATE_WRITE, or when requests pile up, nothing happens.
#pragma once

#include <cstddef>

namespace memsnap {

// The range may be unmapped or moved (mremap) before the thread gets to it: populating then
// fails or touches pages of whatever mapping took its place, which changes no memory contents.
void prefault_pages_async(void* begin, std::size_t bytes);

}  // namespace memsnap
