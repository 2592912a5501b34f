// Named limits that turn hostile or absurd input into clean errors instead of crashes or hangs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memsnap::limits {

inline constexpr std::size_t kMaxNestingDepth = 512;             // containers inside containers
inline constexpr std::size_t kMaxStackValues = 1u << 24;         // values on the pickle VM stack
inline constexpr std::size_t kMaxMemoEntries = 1u << 28;         // memo slots (real 1 GB files: ~25 M)
inline constexpr std::size_t kMaxStringBytes = 1u << 30;         // one str/bytes object
inline constexpr std::size_t kMaxIntBytes = 64;                  // LONG1/LONG4 payload
inline constexpr std::uint64_t kMaxDecompressedBytes = 16ull << 30;  // gzip/zstd output
// A compressed snapshot may expand to this many times its size (real snapshots: 11-30x with
// gzip -9 / zstd -19), and always to kMinDecompressedAllowance; a bomb is refused there.
inline constexpr std::uint64_t kMaxCompressionRatio = 128;
inline constexpr std::uint64_t kMinDecompressedAllowance = 64ull << 20;
inline constexpr std::size_t kMaxContainerItems = 1u << 31;      // total items in all containers
// Values copied from one settings dict or annotation into the model (real ones: a few dozen).
inline constexpr std::size_t kMaxCopiedJsonValues = 4096;
// Distinct unknown keys / actions listed by name in the report (the rest are counted).
inline constexpr std::size_t kMaxListedUnknowns = 256;
// Annotations listed in the JSON report's timelines, in all, split evenly over the devices (the
// rest are counted): 64 devices x 40k annotations for every device would list 2.56 M (about 1 KB
// of memory each while the report is built).
inline constexpr std::size_t kMaxListedAnnotations = 20'000;
// Trace events kept per device whatever --max-trace-events says: the analysis indexes them with
// 32 bits (and 2^32 events would take 128 GiB).
inline constexpr std::uint64_t kMaxKeptEventsPerDevice = 0xFFFFFFFEull;

// Bytes memsnap lets its value arena, memo and decompression buffers grow to: half the machine's
// physical memory (at most 64 GiB), so a hostile file gets a clean error instead of the kernel's
// out-of-memory killer.
std::uint64_t memory_budget_bytes();

}  // namespace memsnap::limits
