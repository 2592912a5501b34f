// Opens a snapshot file: maps or decompresses it and detects its format from the bytes alone.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace memsnap {

enum class Format { Pickle, Json };

// Memory from malloc/realloc: a decompression buffer grows in place (mremap) without zero-filling.
struct FreeDeleter {
  void operator()(std::uint8_t* p) const { std::free(p); }
};
using HeapBytes = std::unique_ptr<std::uint8_t[], FreeDeleter>;
enum class Compression { None, Gzip, Zstd };
const char* format_name(Format f);
const char* compression_name(Compression c);  // "gzip", "zstd"; nullptr for None

// The snapshot's bytes, owned: a read-only mapping of the file or a decompressed buffer.
class InputBytes {
 public:
  InputBytes() = default;
  InputBytes(const InputBytes&) = delete;
  InputBytes& operator=(const InputBytes&) = delete;
  InputBytes(InputBytes&& other) noexcept;
  InputBytes& operator=(InputBytes&& other) noexcept;
  ~InputBytes();

  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  bool file_backed() const { return mapped_; }  // pages can be dropped and re-read from the file
  Format format = Format::Pickle;
  Compression compression = Compression::None;
  std::uint64_t file_bytes = 0;  // size on disk

 private:
  friend InputBytes open_input(const std::string& path);
  friend InputBytes input_from_memory(std::vector<std::uint8_t> bytes);
  void reset();
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;
  std::vector<std::uint8_t> buffer_;  // bytes handed over in memory
  HeapBytes heap_;                     // decompressed bytes
  void adopt(HeapBytes heap, std::size_t size);
};

// Throws InputError (unreadable, empty, compressed garbage, a screenshot, HTML, ...).
InputBytes open_input(const std::string& path);
// Same detection on bytes already in memory (tests, fuzzing).
InputBytes input_from_memory(std::vector<std::uint8_t> bytes);

}  // namespace memsnap
