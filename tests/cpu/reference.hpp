// SPDX-License-Identifier: MIT OR Apache-2.0
// Plain double-precision references for docs/kernels.md, and random inputs for them. Written
// for the tests only, straight from the contract text, sharing nothing with the plugin.
#pragma once

#include "support.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace cpu_test {

// A W4A16 problem: x [m][k] bf16, weights [n][k] as codes + f16 group scales.
struct W4Problem {
  uint32_t m = 0, n = 0, k = 0;
  std::vector<uint16_t> x;        // bf16 bits
  std::vector<uint32_t> qweight;  // [n][k/8]
  std::vector<uint16_t> scales;   // f16 bits [n][k/128]
  std::vector<double> ref;        // [m][n]
  std::vector<double> absum;      // [m][n]: sum of |x * w|, bounds the f32 summation error
};

inline std::vector<uint16_t> random_bf16(std::mt19937_64& rng, size_t count, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<uint16_t> values(count);
  for (auto& v : values) v = to_bf16(dist(rng));
  return values;
}

// Scales: mostly normal f16 in about [2^-8, 2^-4], either sign; one in 64 subnormal.
inline std::vector<uint16_t> random_scales(std::mt19937_64& rng, size_t count) {
  std::vector<uint16_t> values(count);
  for (auto& v : values) {
    const auto mantissa = static_cast<uint16_t>(rng() & 0x3ff);
    const uint16_t sign = (rng() & 1) ? 0x8000 : 0;
    const bool subnormal = rng() % 64 == 0;
    const auto exponent = static_cast<uint16_t>(subnormal ? 0 : 7 + rng() % 4);
    v = static_cast<uint16_t>(sign | (exponent << 10) | mantissa);
  }
  return values;
}

// Reference for rows [row0, row0 + rows) of x against weights starting at `qweight`/`scales`.
inline void w4_reference(const std::vector<uint16_t>& x, const uint32_t* qweight,
                         const uint16_t* scales, uint32_t n, uint32_t k, uint32_t row0,
                         uint32_t rows, double* ref, double* absum) {
  std::vector<double> w(static_cast<size_t>(k));
  std::vector<double> xd(static_cast<size_t>(rows) * k);
  for (uint32_t i = 0; i < rows; ++i)
    for (uint32_t t = 0; t < k; ++t) xd[size_t{i} * k + t] = bf16_value(x[(size_t{row0} + i) * k + t]);
  for (uint32_t j = 0; j < n; ++j) {
    for (uint32_t t = 0; t < k; ++t) {
      const uint32_t word = qweight[size_t{j} * (k / 8) + t / 8];
      const int code = static_cast<int>((word >> (4 * (t % 8))) & 0xf);
      w[t] = (code - 8) * f16_value(scales[size_t{j} * (k / 128) + t / 128]);
    }
    for (uint32_t i = 0; i < rows; ++i) {
      double sum = 0, abs_sum = 0;
      for (uint32_t t = 0; t < k; ++t) {
        const double term = xd[size_t{i} * k + t] * w[t];
        sum += term;
        abs_sum += std::fabs(term);
      }
      ref[size_t{i} * n + j] = sum;
      absum[size_t{i} * n + j] = abs_sum;
    }
  }
}

inline W4Problem make_w4(uint32_t m, uint32_t n, uint32_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  W4Problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.x = random_bf16(rng, size_t{m} * k, -1.0, 1.0);
  p.qweight.resize(size_t{n} * (k / 8));
  for (auto& word : p.qweight) word = static_cast<uint32_t>(rng());
  p.scales = random_scales(rng, size_t{n} * (k / 128));
  p.ref.resize(size_t{m} * n);
  p.absum.resize(size_t{m} * n);
  w4_reference(p.x, p.qweight.data(), p.scales.data(), n, k, 0, m, p.ref.data(), p.absum.data());
  return p;
}

// The error budget of a bf16 result computed with f32 accumulation: the rounding of the exact
// value to bf16 (at most 2^-8 relative, half an ulp of an 8-bit significand) plus the f32
// summation error, bounded generously by 2^-16 of the sum of |terms| (f32 unit roundoff is
// 2^-24; blocked sums over K <= 8192 stay far below 2^8 of it). Any indexing, nibble-order or
// scale mistake moves a result by a whole term or more, far outside this budget.
inline double bf16_budget(double ref, double absum) {
  return std::ldexp(std::fabs(ref), -8) + std::ldexp(absum, -16) + 1e-30;
}

}  // namespace cpu_test
