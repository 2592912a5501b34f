// MappingPager: the pages of a file mapping read once are mapped ahead of the reader and handed
// back behind it, so that the mapping's resident pages stay a window around the reader.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/parallel.h"
#include "read/mapping_pager.h"

namespace memsnap {
namespace mapping_pager_tests {

constexpr std::size_t kMiB = std::size_t(1) << 20;

// How many pages of [begin, end) are mapped in this process (/proc/self/pagemap's "present" bit).
std::size_t present_pages(const std::uint8_t* begin, const std::uint8_t* end) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t first = reinterpret_cast<std::uintptr_t>(begin) / page, count = (end - begin + page - 1) / page;
  std::vector<std::uint64_t> entries(count);
  const int fd = open("/proc/self/pagemap", O_RDONLY);
  const auto bytes = static_cast<std::size_t>(pread(fd, entries.data(), count * 8, static_cast<off_t>(first * 8)));
  close(fd);
  std::size_t present = 0;
  for (std::size_t k = 0; k < bytes / 8; ++k) present += entries[k] >> 63;
  return present;
}

// Waits up to 5 s for the pager's thread to map every page of `ahead` and none of `behind`.
bool settles(const std::uint8_t* ahead_begin, const std::uint8_t* ahead_end, const std::uint8_t* behind_begin,
             const std::uint8_t* behind_end) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  for (int k = 0; k < 500; ++k) {
    if (present_pages(ahead_begin, ahead_end) == static_cast<std::size_t>(ahead_end - ahead_begin) / page &&
        present_pages(behind_begin, behind_end) == 0) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

struct MappedFile {
  explicit MappedFile(std::size_t size) : path(std::filesystem::temp_directory_path() / ("memsnap_pager_" + std::to_string(getpid()))) {
    {
      std::ofstream out(path, std::ios::binary);
      std::vector<char> chunk(kMiB, 'x');
      for (std::size_t k = 0; k < size / kMiB; ++k) out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    }
    const int fd = open(path.c_str(), O_RDONLY);
    data = static_cast<const std::uint8_t*>(mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0));
    close(fd);
    bytes = size;
  }
  ~MappedFile() {
    munmap(const_cast<std::uint8_t*>(data), bytes);
    std::filesystem::remove(path);
  }
  std::filesystem::path path;
  const std::uint8_t* data = nullptr;
  std::size_t bytes = 0;
};

// As the reader advances through a 128 MiB file, the 32 MiB after it are mapped before it reads
// them, and what lies more than 8 MiB behind it is handed back: the mapping holds a window around
// the reader, whatever the file's size.
TEST(MappingPager, MapsAheadOfTheReaderAndHandsBackBehindIt) {
  if (worker_count() < 2) GTEST_SKIP() << "the pager maps ahead on a second core only";
  const MappedFile file(128 * kMiB);
  ASSERT_NE(file.data, MAP_FAILED);
  const std::uint8_t* const data = file.data;
  ASSERT_EQ(present_pages(data, data + file.bytes), 0u);
  MappingPager pager(data, file.bytes);
  const std::size_t ahead = 2 * MappingPager::kStep, behind = MappingPager::kStep / 2;
  for (std::size_t pos : {std::size_t(0), 20 * kMiB, 64 * kMiB, 100 * kMiB, file.bytes}) {
    pager.advance(pos);
    const std::size_t released = pos > behind ? pos - behind : 0;
    EXPECT_TRUE(settles(data + pos, data + std::min(pos + ahead, file.bytes), data, data + released)) << "at " << pos / kMiB << " MiB";
  }
}

}  // namespace mapping_pager_tests
}  // namespace memsnap
