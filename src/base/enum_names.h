// One name table per enum: `EnumNames<E>::names` lists the names in the order of E's values, so
// an enum's name and its parsing both come from one array (no switch statements to keep in step).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace memsnap {

// Specialize with `static constexpr std::array<std::string_view, N> names = {...};`, one name
// per enumerator in declaration order (the enumerators' values must be 0 .. N-1).
template <class E>
struct EnumNames;

template <class E>
constexpr std::string_view name_of(E value) {
  const auto& names = EnumNames<E>::names;
  const auto i = static_cast<std::size_t>(value);
  return i < names.size() ? names[i] : std::string_view("unknown");
}

template <class E>
constexpr std::optional<E> enum_from_name(std::string_view name) {
  const auto& names = EnumNames<E>::names;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<E>(i);
  }
  return std::nullopt;
}

}  // namespace memsnap
