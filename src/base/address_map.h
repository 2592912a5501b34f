// Hash maps keyed by device address, for the per-event replays (millions of inserts and
// erases): Abseil's open-addressing flat_hash_map instead of std::unordered_map's nodes.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <cstdint>

namespace memsnap {

template <typename Value>
using AddressMap = absl::flat_hash_map<std::uint64_t, Value>;

}  // namespace memsnap
