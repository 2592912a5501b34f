// Findings from what the memory is (the main memory budget's kinds): autocast's weight-copy
// cache, and a KV cache (pre-allocated by vLLM / SGLang, or grown by generation).
#pragma once

#include <optional>

#include "analysis/analyze.h"

namespace memsnap {

// autocast_weight_copies: autocast's cast cache holds >= 256 MiB and >= 10% of the main budget.
std::optional<Pattern> autocast_weight_copies(const Measured& measured);

// kv_cache: a KV cache holds >= 1 GiB and >= 25% of the main budget.
std::optional<Pattern> kv_cache(const Measured& measured);

}  // namespace memsnap
