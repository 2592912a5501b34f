// Test-only pickle writer: emits raw opcodes so tests can build exact (and hostile) byte streams.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace memsnap::test {

class PickleWriter {
 public:
  explicit PickleWriter(int protocol = 4) {
    op(0x80);
    u8(static_cast<std::uint8_t>(protocol));
  }
  PickleWriter& op(std::uint8_t code) { bytes_.push_back(code); return *this; }
  PickleWriter& u8(std::uint8_t v) { bytes_.push_back(v); return *this; }
  PickleWriter& le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  PickleWriter& raw(std::string_view s) { bytes_.insert(bytes_.end(), s.begin(), s.end()); return *this; }
  PickleWriter& mark() { return op('('); }
  PickleWriter& dict() { return op('}'); }
  PickleWriter& list() { return op(']'); }
  PickleWriter& memoize() { return op(0x94); }
  PickleWriter& setitems() { return op('u'); }
  PickleWriter& appends() { return op('e'); }
  PickleWriter& append() { return op('a'); }
  PickleWriter& setitem() { return op('s'); }
  PickleWriter& binget(std::uint8_t i) { return op('h').u8(i); }
  PickleWriter& long_binget(std::uint32_t i) { return op('j').le(i, 4); }
  PickleWriter& binput(std::uint8_t i) { return op('q').u8(i); }
  PickleWriter& long_binput(std::uint32_t i) { return op('r').le(i, 4); }
  PickleWriter& none() { return op('N'); }
  PickleWriter& boolean(bool b) { return op(b ? 0x88 : 0x89); }
  PickleWriter& stop() { return op('.'); }
  PickleWriter& str(std::string_view s) {
    if (s.size() < 256) op(0x8c).u8(static_cast<std::uint8_t>(s.size()));
    else op('X').le(s.size(), 4);
    return raw(s);
  }
  PickleWriter& binunicode(std::string_view s) { return op('X').le(s.size(), 4).raw(s); }
  // Smallest encoding, as CPython's pickler chooses it.
  PickleWriter& integer(std::int64_t v) {
    if (v >= 0 && v <= 0xff) return op('K').u8(static_cast<std::uint8_t>(v));
    if (v >= 0 && v <= 0xffff) return op('M').le(static_cast<std::uint64_t>(v), 2);
    if (v >= INT32_MIN && v <= INT32_MAX) return op('J').le(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
    int n = 8;
    while (n > 1) {
      const std::int64_t shifted = v >> (8 * (n - 1) - 1);
      if (shifted != 0 && shifted != -1) break;
      --n;
    }
    return op(0x8a).u8(static_cast<std::uint8_t>(n)).le(static_cast<std::uint64_t>(v), n);
  }
  PickleWriter& real(double d) {
    std::uint64_t bits;
    static_assert(sizeof bits == sizeof d);
    __builtin_memcpy(&bits, &d, sizeof d);
    op('G');
    for (int i = 7; i >= 0; --i) bytes_.push_back(static_cast<std::uint8_t>(bits >> (8 * i)));
    return *this;
  }
  // key/value helpers for dicts built with MARK ... SETITEMS
  PickleWriter& key(std::string_view k) { return str(k).memoize(); }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }
  // The bytes with everything after PROTO in one pickle frame (FRAME and its 8-byte length), as
  // pickle.dumps frames a protocol 4 stream (in frames of 64 KiB; one is as valid).
  std::vector<std::uint8_t> framed() const {
    std::vector<std::uint8_t> out(bytes_.begin(), bytes_.begin() + 2);
    out.push_back(0x95);
    const std::uint64_t n = bytes_.size() - 2;
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
    out.insert(out.end(), bytes_.begin() + 2, bytes_.end());
    return out;
  }

 private:
  std::vector<std::uint8_t> bytes_;
};


}  // namespace memsnap::test
