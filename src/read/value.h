// The generic value tree both readers produce: an arena of 16-byte values, containers as chunk
// chains, strings as views into the input. Shared pickle objects stay shared (one container id).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "base/big_vector.h"

namespace memsnap {

enum class Kind : std::uint8_t {
  None,
  Bool,
  Int,       // fits int64
  UInt,      // in [2^63, 2^64)
  BigInt,    // wider than 64 bits: value not kept, only that it is huge
  Float,
  Str,
  Bytes,
  List,
  Tuple,
  Dict,
  Set,
  // Values a streaming consumer put in place of containers it has already converted.
  Interned,  // payload: consumer-defined id (aux: consumer-defined tag)
  Released,  // a container freed after streaming; referencing it again is an error
};

const char* kind_name(Kind kind);

struct Value {
  Kind kind = Kind::None;
  std::uint32_t aux = 0;  // Str/Bytes: length; Interned: tag
  union {
    std::int64_t i;
    std::uint64_t u;
    double f;
    const char* s;
    std::uint64_t index;  // container index
  };
  Value() : i(0) {}

  static Value none() { return Value(); }
  static Value boolean(bool b) { Value v; v.kind = Kind::Bool; v.i = b; return v; }
  static Value integer(std::int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
  static Value uinteger(std::uint64_t x) { Value v; v.kind = Kind::UInt; v.u = x; return v; }
  static Value big_integer() { Value v; v.kind = Kind::BigInt; return v; }
  static Value real(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
  static Value string(const char* data, std::uint32_t size, Kind kind = Kind::Str) {
    Value v; v.kind = kind; v.s = data; v.aux = size; return v;
  }
  static Value container(Kind kind, std::uint64_t index) { Value v; v.kind = kind; v.index = index; return v; }
  static Value interned(std::uint32_t tag, std::uint64_t id) { Value v; v.kind = Kind::Interned; v.aux = tag; v.u = id; return v; }
  static Value released() { Value v; v.kind = Kind::Released; return v; }

  bool is_container() const { return kind >= Kind::List && kind <= Kind::Set; }
  bool is_str() const { return kind == Kind::Str; }
  std::string_view str() const { return {s, aux}; }
  // Int as int64; UInt saturates; anything else -> fallback.
  std::int64_t as_int(std::int64_t fallback = 0) const;
  std::optional<std::int64_t> get_int() const;
};
static_assert(sizeof(Value) == 16);

// Where a container's items live: a chain of chunks in the item arena.
struct Container {
  Kind kind = Kind::List;
  bool shared = false;           // its chunks are another container's too (copied before an append)
  std::uint32_t size = 0;        // number of items (a dict counts keys and values)
  std::uint32_t first_chunk = kNoChunk;
  std::uint32_t last_chunk = kNoChunk;
  static constexpr std::uint32_t kNoChunk = 0xffffffffu;
};

struct Chunk {
  std::uint64_t begin = 0;  // index into items
  std::uint32_t count = 0;
  std::uint32_t next = Container::kNoChunk;
};

// A view of one container's items, iterable in order.
class Items {
 public:
  class iterator {
   public:
    iterator(const class Document* doc, std::uint32_t chunk, std::uint32_t offset) : doc_(doc), chunk_(chunk), offset_(offset) {}
    inline const Value& operator*() const;
    inline iterator& operator++();
    bool operator!=(const iterator& other) const { return chunk_ != other.chunk_ || offset_ != other.offset_; }

   private:
    const class Document* doc_;
    std::uint32_t chunk_;
    std::uint32_t offset_;
  };
  Items(const class Document* doc, std::uint32_t first_chunk) : doc_(doc), first_(first_chunk) {}
  iterator begin() const { return iterator(doc_, first_, 0); }
  iterator end() const { return iterator(doc_, Container::kNoChunk, 0); }

 private:
  const class Document* doc_;
  std::uint32_t first_;
};

class Document {
 public:
  Value root;

  Value new_container(Kind kind);
  // Appends items to a container (one new chunk).
  void append(const Value& container, const Value* items, std::size_t count);
  // Gives the empty `container` the items of `source` without copying them: a list equal to an
  // earlier one (a block's frames list) costs no items. Either is copied before it is appended to.
  void share_items(const Value& container, const Value& source);
  // True when the container holds exactly items[0, count).
  bool holds(const Value& container, const Value* items, std::size_t count) const;
  const Container& container(const Value& v) const { return containers_[v.index]; }
  std::uint32_t size(const Value& v) const { return v.is_container() ? containers_[v.index].size : 0; }
  Items items(const Value& v) const { return Items(this, v.is_container() ? containers_[v.index].first_chunk : Container::kNoChunk); }
  // Dict lookup by string key (linear: snapshot dicts are small); nullptr when absent.
  const Value* find(const Value& dict, std::string_view key) const;

  // Arena watermarks for streaming: everything created after a mark can be dropped at once.
  struct Mark {
    std::size_t containers, chunks, items;
  };
  Mark mark() const { return {containers_.size(), chunks_.size(), items_.size()}; }
  void release_to(const Mark& mark);

 private:
  friend class Items::iterator;
  void unshare(Container& c);
  // BigVectors: growing by mremap, the arena never holds an old and a new copy at once (with
  // std::vector's doubling the peak was twice the items of the segments' blocks and frames).
  BigVector<Container> containers_;
  BigVector<Chunk> chunks_;
  BigVector<Value> items_;
};

// Inline: every walk over a dict's or a list's items (blocks, frames lists, settings) runs these.
const Value& Items::iterator::operator*() const {
  const Chunk& c = doc_->chunks_[chunk_];
  return doc_->items_[c.begin + offset_];
}

Items::iterator& Items::iterator::operator++() {
  const Chunk& c = doc_->chunks_[chunk_];
  if (++offset_ >= c.count) {
    chunk_ = c.next;
    offset_ = 0;
  }
  return *this;
}

}  // namespace memsnap
