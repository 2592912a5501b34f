// BigVector<T>: a vector for large arrays of trivially copyable values (the trace events, the
// pickle memo, the analysis' per-event arrays). It maps its own memory and grows with mremap,
// which moves page tables instead of copying the elements; small arrays pay only address space.
//
// Once it holds a few MiB, pushes and appends ask a background thread to fault in the next pages
// (prefault_pages_async) before they are written, so the writer takes few page faults itself.
//
// A mapping of kHugeFrom bytes or more asks for transparent huge pages (madvise MADV_HUGEPAGE; the
// mappings are 2 MiB-aligned): one page fault per 2 MiB instead of 512. Page faults are what fresh
// memory costs on a VM (each one a trap to the hypervisor), and a 1 GB snapshot's events, memo and
// analysis arrays fault in hundreds of MB (bench/README.md §19). Smaller vectors keep 4 KiB pages,
// so that a small snapshot's many small arrays do not each hold a 2 MiB page.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <type_traits>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEMSNAP_BIG_VECTOR_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MEMSNAP_BIG_VECTOR_ASAN 1
#endif
#ifdef MEMSNAP_BIG_VECTOR_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace memsnap {

namespace big_vector_detail {
void* map_bytes(std::size_t bytes);  // throws std::bad_alloc
void* remap_bytes(void* old, std::size_t old_bytes, std::size_t new_bytes);  // throws std::bad_alloc
void unmap_bytes(void* p, std::size_t bytes) noexcept;
std::size_t round_to_mapping(std::size_t bytes);  // a multiple of 2 MiB, at least 2 MiB
// Requests the pages of [from, to) bytes of the mapping at `data` (page-aligned offsets) ahead of
// `used` bytes written; returns the offset requested up to (prefault_pages_async).
std::size_t prefault_ahead(void* data, std::size_t mapped, std::size_t used, std::size_t requested);
inline constexpr std::size_t kPrefaultFrom = std::size_t(4) << 20;  // vectors smaller than this never ask
inline constexpr std::size_t kHugeFrom = std::size_t(4) << 20;  // mappings this large get huge pages
inline constexpr std::size_t kPrefaultStep = std::size_t(1) << 20;  // asked again after this much growth
}  // namespace big_vector_detail

template <typename T>
class BigVector {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  using value_type = T;
  using size_type = std::size_t;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<T*>;
  using const_reverse_iterator = std::reverse_iterator<const T*>;

  BigVector() = default;
  BigVector(std::initializer_list<T> items) { append(items.begin(), items.size()); }
  BigVector(const BigVector& other) { append(other.data_, other.size_); }
  BigVector(BigVector&& other) noexcept { swap(other); }
  BigVector& operator=(const BigVector& other) {
    if (this != &other) {
      clear();
      append(other.data_, other.size_);
    }
    return *this;
  }
  BigVector& operator=(BigVector&& other) noexcept {
    BigVector tmp(std::move(other));
    swap(tmp);
    return *this;
  }
  ~BigVector() {
    if (!data_) return;
    unpoison_all();
    big_vector_detail::unmap_bytes(data_, mapped_);
  }
  void swap(BigVector& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
    std::swap(mapped_, other.mapped_);
    std::swap(prefaulted_, other.prefaulted_);
    std::swap(prefault_at_, other.prefault_at_);
    std::swap(written_, other.written_);
  }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::size_t capacity() const { return capacity_; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }

  void push_back(const T& v) {
    if (size_ == capacity_) [[unlikely]] grow(size_ + 1);
    lengthen(size_ + 1);
    data_[size_ - 1] = v;
    if (size_ * sizeof(T) >= prefault_at_) [[unlikely]] prefault();
  }
  void append(const T* items, std::size_t count) {
    if (count == 0) return;
    if (size_ + count > capacity_) grow(size_ + count);
    lengthen(size_ + count);
    std::memcpy(static_cast<void*>(data_ + size_ - count), items, count * sizeof(T));
    if (size_ * sizeof(T) >= prefault_at_) [[unlikely]] prefault();
  }
  void reserve(std::size_t n) {
    if (n > capacity_) grow(n);
  }
  // New elements are copies of `fill` (value-initialised by default).
  // Growing with a fill of zero bytes writes only what was in use before: the mapping past
  // every size the vector ever had is still the kernel's zero pages, and stays unfaulted.
  void resize(std::size_t n, const T& fill = T()) {
    if (n > capacity_) grow(n);
    const std::size_t old = size_;
    const std::size_t end = zero_bytes(fill) ? std::min(n, std::max(old, written_)) : n;
    set_size(n);
    for (std::size_t k = old; k < end; ++k) data_[k] = fill;
  }
  // New elements are left unset: for arrays the caller fills completely right away.
  void resize_for_overwrite(std::size_t n) {
    if (n > capacity_) grow(n);
    set_size(n);
  }
  void pop_back() { set_size(size_ - 1); }
  void clear() { set_size(0); }
  // The same memory as a vector of U, an element type of the same size: the elements' bytes
  // stay, for the caller to rewrite as U one by one (memcpy); this vector is left empty.
  template <typename U>
  BigVector<U> rebind() && {
    static_assert(sizeof(U) == sizeof(T));
    BigVector<U> out;
    out.data_ = reinterpret_cast<U*>(data_);
    out.size_ = size_;
    out.capacity_ = capacity_;
    out.mapped_ = mapped_;
    out.written_ = written_;
    out.prefaulted_ = prefaulted_;
    out.prefault_at_ = prefault_at_;
    data_ = nullptr;
    size_ = capacity_ = mapped_ = written_ = prefaulted_ = 0;
    prefault_at_ = big_vector_detail::kPrefaultFrom;
    return out;
  }

 private:
  template <typename>
  friend class BigVector;
  void prefault() {
    prefaulted_ = big_vector_detail::prefault_ahead(data_, mapped_, size_ * sizeof(T), prefaulted_);
    prefault_at_ = size_ * sizeof(T) + big_vector_detail::kPrefaultStep;
  }
  void grow(std::size_t at_least) {
    const std::size_t want = std::max(at_least, capacity_ * 2);
    if (want > std::size_t(-1) / sizeof(T) / 2) throw std::bad_alloc();
    const std::size_t bytes = big_vector_detail::round_to_mapping(want * sizeof(T));
    unpoison_all();  // the shadow of a moved or unmapped range must not stay poisoned
    void* p = data_ ? big_vector_detail::remap_bytes(data_, mapped_, bytes)
                    : big_vector_detail::map_bytes(bytes);
    data_ = static_cast<T*>(p);
    mapped_ = bytes;
    capacity_ = bytes / sizeof(T);
    poison_unused();
  }
  // Under AddressSanitizer the capacity past size() is poisoned, as in std::vector's
  // annotations; a size change re-annotates only the elements that changed sides.
  static bool zero_bytes(const T& v) {
    const auto* b = reinterpret_cast<const unsigned char*>(&v);
    for (std::size_t k = 0; k < sizeof(T); ++k) {
      if (b[k] != 0) return false;
    }
    return true;
  }
  void set_size(std::size_t n) {
    if (n < size_) {
      if (size_ > written_) written_ = size_;  // shrinking: keep how far the elements were written
#ifdef MEMSNAP_BIG_VECTOR_ASAN
      if (data_) ASAN_POISON_MEMORY_REGION(data_ + n, (size_ - n) * sizeof(T));
#endif
      size_ = n;
      return;
    }
    lengthen(n);
  }
  // set_size for n >= size_ (pushes and appends: no high-water mark to keep, see written_).
  void lengthen(std::size_t n) {
#ifdef MEMSNAP_BIG_VECTOR_ASAN
    if (data_ && n > size_) ASAN_UNPOISON_MEMORY_REGION(data_ + size_, (n - size_) * sizeof(T));
#endif
    size_ = n;
  }
  void unpoison_all() {
#ifdef MEMSNAP_BIG_VECTOR_ASAN
    if (data_) ASAN_UNPOISON_MEMORY_REGION(data_, mapped_);
#endif
  }
  void poison_unused() {
#ifdef MEMSNAP_BIG_VECTOR_ASAN
    if (!data_) return;
    ASAN_UNPOISON_MEMORY_REGION(data_, size_ * sizeof(T));
    ASAN_POISON_MEMORY_REGION(data_ + size_, mapped_ - size_ * sizeof(T));
#endif
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  std::size_t mapped_ = 0;  // bytes mapped at data_
  // With size_, the largest size so far: elements at or past max(written_, size_) were never
  // written (set when the vector shrinks, so that a push need not update it).
  std::size_t written_ = 0;
  std::size_t prefaulted_ = 0;  // bytes from data_ whose pages were asked for (they survive mremap)
  std::size_t prefault_at_ = big_vector_detail::kPrefaultFrom;  // size in bytes that asks for more
};

}  // namespace memsnap
