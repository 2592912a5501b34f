// MappingPager: manages the pages of a read-only file mapping that is read once from start to
// end. Behind the reader, consumed pages are handed back (so resident memory does not grow with
// the file); ahead of it, the next pages are mapped in advance. With a second core this runs on
// its own thread, so the reader itself takes no page faults and pays for no unmapping.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

namespace memsnap {

class MappingPager {
 public:
  // `from`: where reading starts (nothing before it is handed back); `own_thread`: false only
  // hands back what lies more than kStep / 4 behind, on the caller's thread, whose own page faults
  // map what is ahead (the trace split's threads, read/split_trace.h: several at once must not
  // hold much of the file resident).
  MappingPager(const std::uint8_t* data, std::size_t size, std::size_t from = 0, bool own_thread = true);
  ~MappingPager();
  MappingPager(const MappingPager&) = delete;
  MappingPager& operator=(const MappingPager&) = delete;

  // The reader has consumed everything before `pos`. Cheap: call it every few MiB.
  void advance(std::size_t pos);

  static constexpr std::size_t kStep = std::size_t(16) << 20;  // granularity of both directions

 private:
  void release_before(std::size_t pos);   // hands back pages well behind pos
  void populate_after(std::size_t pos);   // maps the pages ahead of pos
  void work();

  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t page_;
  std::size_t behind_;  // kept behind the reader (recent strings)
  std::size_t released_upto_ = 0;
  std::size_t populated_upto_ = 0;

  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t target_ = 0;  // latest position given to advance()
  bool stop_ = false;
};

}  // namespace memsnap
