// SPDX-License-Identifier: MIT OR Apache-2.0
// Overflow-checked arithmetic for sizes that come from files (shapes, element counts, byte
// counts): every product of dimensions goes through here, so a shape that wraps is an error, never
// a small number that happens to match.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>

namespace metrale::layers {

// a * b, or nullopt when it does not fit in T.
template <class T>
  requires std::is_unsigned_v<T>
constexpr std::optional<T> checked_mul(T a, T b) noexcept {
  T out{};
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a + b, or nullopt when it does not fit in T.
template <class T>
  requires std::is_unsigned_v<T>
constexpr std::optional<T> checked_add(T a, T b) noexcept {
  T out{};
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// The product of all dimensions (1 for none), or nullopt when it overflows 64 bits. A zero
// dimension makes it 0 whatever the others are.
constexpr std::optional<uint64_t> checked_product(std::span<const uint64_t> dims) noexcept {
  uint64_t n = 1;
  bool overflow = false;
  for (uint64_t d : dims) {
    if (d == 0) return uint64_t{0};
    if (!overflow) {
      if (auto next = checked_mul(n, d)) n = *next;
      else overflow = true;
    }
  }
  if (overflow) return std::nullopt;
  return n;
}

}  // namespace metrale::layers
