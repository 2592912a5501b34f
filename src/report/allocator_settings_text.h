// The allocator settings a snapshot records (allocator_settings), in one line for the text and
// HTML reports: the knobs that change what the allocator does with free memory.
#pragma once

#include <string>

#include "model/snapshot.h"

namespace memsnap {

// "PYTORCH_CUDA_ALLOC_CONF unset: expandable_segments off, max_split_size unlimited,
// garbage_collection_threshold 0, roundup_power2_divisions none", or why there are none.
std::string allocator_settings_line(const AllocatorSettings& settings);

}  // namespace memsnap
