// The value arena shared by the pickle and JSON readers.
#include "read/value.h"

#include <limits>

#include "base/error.h"
#include "base/limits.h"

namespace memsnap {

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: case Kind::UInt: case Kind::BigInt: return "int";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Set: return "set";
    case Kind::Interned: return "converted object";
    case Kind::Released: return "released object";
  }
  return "?";
}

std::int64_t Value::as_int(std::int64_t fallback) const {
  if (kind == Kind::Int) return i;
  if (kind == Kind::Bool) return i;
  if (kind == Kind::UInt || kind == Kind::BigInt) return std::numeric_limits<std::int64_t>::max();
  return fallback;
}

std::optional<std::int64_t> Value::get_int() const {
  if (kind == Kind::Int || kind == Kind::Bool) return i;
  if (kind == Kind::UInt || kind == Kind::BigInt) return std::numeric_limits<std::int64_t>::max();
  return std::nullopt;
}

Value Document::new_container(Kind kind) {
  Container c;
  c.kind = kind;
  containers_.push_back(c);
  return Value::container(kind, containers_.size() - 1);
}

void Document::append(const Value& container, const Value* items, std::size_t count) {
  if (count == 0) return;
  Container& c = containers_[container.index];
  if (c.shared) [[unlikely]] unshare(c);
  if (items_.size() + count > limits::kMaxContainerItems || c.size + count > std::numeric_limits<std::uint32_t>::max() ||
      (items_.size() + count) * sizeof(Value) > limits::memory_budget_bytes()) {
    throw InputError("the snapshot's segments and settings hold more objects than memsnap's memory budget allows",
                     "run memsnap on a machine with more memory, or check the file is a real snapshot");
  }
  // Extend the last chunk in place when it ends at the arena's end (the common case).
  if (c.last_chunk != Container::kNoChunk) {
    Chunk& last = chunks_[c.last_chunk];
    if (last.begin + last.count == items_.size()) {
      items_.append(items, count);
      last.count += static_cast<std::uint32_t>(count);
      c.size += static_cast<std::uint32_t>(count);
      return;
    }
  }
  Chunk chunk;
  chunk.begin = items_.size();
  chunk.count = static_cast<std::uint32_t>(count);
  items_.append(items, count);
  chunks_.push_back(chunk);
  const auto id = static_cast<std::uint32_t>(chunks_.size() - 1);
  if (c.last_chunk == Container::kNoChunk) c.first_chunk = id;
  else chunks_[c.last_chunk].next = id;
  c.last_chunk = id;
  c.size += static_cast<std::uint32_t>(count);
}

void Document::share_items(const Value& container, const Value& source) {
  Container& c = containers_[container.index];
  Container& from = containers_[source.index];
  from.shared = true;
  c.shared = true;
  c.size = from.size;
  c.first_chunk = from.first_chunk;
  c.last_chunk = from.last_chunk;
}

bool Document::holds(const Value& container, const Value* items, std::size_t count) const {
  if (size(container) != count) return false;
  std::size_t k = 0;
  for (const Value& v : this->items(container)) {
    const Value& w = items[k++];
    if (v.kind != w.kind || v.aux != w.aux || v.u != w.u) return false;
  }
  return true;
}

// A shared container gets its own copy of the items (as one chunk) before it changes.
void Document::unshare(Container& c) {
  std::vector<Value> copy;
  copy.reserve(c.size);
  for (std::uint32_t k = c.first_chunk; k != Container::kNoChunk; k = chunks_[k].next) {
    copy.insert(copy.end(), items_.begin() + static_cast<std::ptrdiff_t>(chunks_[k].begin),
                items_.begin() + static_cast<std::ptrdiff_t>(chunks_[k].begin + chunks_[k].count));
  }
  c.shared = false;
  c.size = 0;
  c.first_chunk = c.last_chunk = Container::kNoChunk;
  if (copy.empty()) return;
  Chunk chunk;
  chunk.begin = items_.size();
  chunk.count = static_cast<std::uint32_t>(copy.size());
  items_.append(copy.data(), copy.size());
  chunks_.push_back(chunk);
  c.first_chunk = c.last_chunk = static_cast<std::uint32_t>(chunks_.size() - 1);
  c.size = chunk.count;
}

const Value* Document::find(const Value& dict, std::string_view key) const {
  if (dict.kind != Kind::Dict) return nullptr;
  bool is_key = true;
  const Value* found_key = nullptr;
  for (const Value& v : items(dict)) {
    if (is_key) {
      found_key = (v.kind == Kind::Str && v.str() == key) ? &v : nullptr;
    } else if (found_key) {
      return &v;
    }
    is_key = !is_key;
  }
  return nullptr;
}

void Document::release_to(const Mark& mark) {
  containers_.resize(mark.containers);
  chunks_.resize(mark.chunks);
  items_.resize(mark.items);
}

}  // namespace memsnap
