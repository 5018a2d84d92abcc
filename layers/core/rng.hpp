// SPDX-License-Identifier: MIT OR Apache-2.0
// The deterministic generator behind synthetic weights and inputs: SplitMix64. Same seed, same
// stream, on every platform and compiler (no std:: distributions, whose output is unspecified).
#pragma once

#include <cstdint>
#include <string_view>

namespace metrale::layers {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) noexcept : state_(seed) {}
  uint64_t next() noexcept {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi).
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }

 private:
  uint64_t state_;
};

// A seed for one named stream derived from a base seed (FNV-1a of the name mixed in), so each
// tensor's contents do not depend on the order in which tensors are generated.
inline uint64_t derive_seed(uint64_t base, std::string_view name) noexcept {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  SplitMix64 mix(base ^ hash);
  return mix.next();
}

}  // namespace metrale::layers
