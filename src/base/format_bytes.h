// Human-readable binary sizes (KiB, MiB, GiB) and size parsing for command-line values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace memsnap {

// 1536 -> "1.50 KiB"; values below 1 KiB print as "N B".
std::string format_bytes(std::int64_t bytes);
std::string format_bytes(std::uint64_t bytes);

// "81920MiB", "80GiB", "80GB", "1.5G", "123" -> bytes. Decimal units (GB) are powers of 1000.
std::optional<std::uint64_t> parse_size(std::string_view text);

}  // namespace memsnap
