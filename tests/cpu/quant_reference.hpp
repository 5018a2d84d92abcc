// SPDX-License-Identifier: MIT OR Apache-2.0
// Double-precision references for docs/kernels.md's "Quantized weight families beyond W4A16",
// written from the contract text for the tests only (nothing shared with the plugin), and the
// inputs the tests feed them: canonical layouts w4-zp, w8-zp, fp8-e4m3, bf16-nk and f16-nk,
// int8 activations.
#pragma once

#include "reference.hpp"

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace cpu_test {

enum class Fam { w4a16_zp, w8a16, fp8, w4a8, w8a8, bf16, f16 };

struct FamInfo {
  const char* module;
  uint32_t bits;  // 4, 8 or 16
  bool zeros;
  bool int8;      // int8 activations (xq, xscale)
  bool fp8;
  bool w16;       // bf16 / f16 weights: the values, no scales, no group argument
};
inline FamInfo info(Fam f) {
  switch (f) {
    case Fam::w4a16_zp: return {"w4a16_zp", 4, true, false, false, false};
    case Fam::w8a16: return {"w8a16", 8, true, false, false, false};
    case Fam::fp8: return {"fp8", 8, false, false, true, false};
    case Fam::w4a8: return {"w4a8", 4, true, true, false, false};
    case Fam::bf16: return {"bf16", 16, false, false, false, true};
    case Fam::f16: return {"f16", 16, false, false, false, true};
    case Fam::w8a8: break;
  }
  return {"w8a8", 8, true, true, false, false};
}

// OCP FP8 E4M3 ("e4m3fn"): sign bit, 4 exponent bits (bias 7), 3 mantissa bits, subnormal when
// the exponent is 0, 0x7f / 0xff NaN, no infinities.
inline double e4m3_value(uint8_t code) {
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int exponent = (code >> 3) & 0xf, mantissa = code & 7;
  if (exponent == 0xf && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa, -9);  // 2^(1-7) * m/8
  return sign * std::ldexp(8 + mantissa, exponent - 10);      // 2^(e-7) * (1 + m/8)
}

// One stack of `count` matrices [n][k] in a family's canonical layout, and activations.
struct QuantProblem {
  Fam fam{};
  uint32_t m = 0, n = 0, k = 0, group = 128, count = 1;
  std::vector<uint8_t> codes;   // w4: u32 words [n][k/8] as bytes; w8/fp8: u8 [n][k]; w16: [n][k] as bytes
  std::vector<float> scales;    // [count][n][k/group] (empty for w16)
  std::vector<uint8_t> zeros;   // [count][n][k/group] (empty for fp8)
  std::vector<uint16_t> x;      // bf16 [rows][k] (bf16 families)
  std::vector<int8_t> xq;       // int8 [rows][k] (int8 families)
  std::vector<float> xscale;    // [rows]
  std::vector<int32_t> offsets; // grouped problems: [count + 1]
  std::vector<double> ref, absum;  // [rows][n]
};

inline uint32_t code_at(const QuantProblem& p, uint32_t matrix, uint32_t row, uint32_t t) {
  const size_t base = (size_t{matrix} * p.n + row) * p.k;
  if (info(p.fam).bits == 16) return p.codes[2 * (base + t)] | uint32_t{p.codes[2 * (base + t) + 1]} << 8;
  if (info(p.fam).bits == 8) return p.codes[base + t];
  const uint8_t byte = p.codes[(base + t) / 2];  // 8 codes per little-endian u32, lowest nibble first
  return t % 2 == 0 ? byte & 0xfu : byte >> 4;
}

// y rows [row0, row0 + rows) against matrix `matrix`: for bf16 activations sum_k x w with
// w = (q - z) s or e4m3(q) s; for int8 xscale * sum_g s (sum xq q - z sum xq). absum: the sum of
// the magnitudes of the terms the result is made of (what bounds an f32 accumulation's error).
inline void quant_reference(QuantProblem& p, uint32_t matrix, uint32_t row0, uint32_t rows) {
  const FamInfo f = info(p.fam);
  const uint32_t groups = p.k / p.group;
  for (uint32_t c = 0; c < p.n; ++c) {
    for (uint32_t i = row0; i < row0 + rows; ++i) {
      double sum = 0, abs_sum = 0;
      for (uint32_t g = 0; g < groups; ++g) {
        const size_t gi = (size_t{matrix} * p.n + c) * groups + g;
        const double s = f.w16 ? 1.0 : p.scales[gi];
        const int z = f.zeros ? p.zeros[gi] : 0;
        if (f.int8) {
          int64_t dot = 0, xs = 0;
          for (uint32_t t = g * p.group; t < (g + 1) * p.group; ++t) {
            const int xv = p.xq[size_t{i} * p.k + t];
            dot += int64_t{xv} * code_at(p, matrix, c, t);
            xs += xv;
          }
          const double term = s * static_cast<double>(dot - z * xs);
          sum += term;
          abs_sum += std::fabs(term);
          continue;
        }
        for (uint32_t t = g * p.group; t < (g + 1) * p.group; ++t) {
          const uint32_t q = code_at(p, matrix, c, t);
          const double v = p.fam == Fam::bf16 ? bf16_value(static_cast<uint16_t>(q))
                           : p.fam == Fam::f16  ? f16_value(static_cast<uint16_t>(q))
                           : f.fp8              ? e4m3_value(static_cast<uint8_t>(q))
                                                : static_cast<double>(int(q) - z);
          const double w = v * s;
          const double term = bf16_value(p.x[size_t{i} * p.k + t]) * w;
          sum += term;
          abs_sum += std::fabs(term);
        }
      }
      const double row_scale = f.int8 ? p.xscale[i] : 1.0;
      p.ref[size_t{i} * p.n + c] = sum * row_scale;
      p.absum[size_t{i} * p.n + c] = abs_sum * std::fabs(row_scale);
    }
  }
}

// f32 group scales: mostly about 2^-8 .. 2^-4 of either sign, one in 32 tiny (about 2^-100).
inline std::vector<float> random_f32_scales(std::mt19937_64& rng, size_t count) {
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::vector<float> values(count);
  for (auto& v : values) {
    const int exponent = rng() % 32 == 0 ? -100 : -8 + static_cast<int>(rng() % 5);
    v = static_cast<float>(std::ldexp(mantissa(rng), exponent) * ((rng() & 1) ? -1 : 1));
  }
  return values;
}

// Zero points: half at the extremes the formats allow (4-bit: 0, 8, 15, 16; 8-bit: 0, 128,
// 255), half uniform.
inline std::vector<uint8_t> random_zeros(std::mt19937_64& rng, size_t count, uint32_t bits) {
  static constexpr uint8_t k4[] = {0, 8, 15, 16}, k8[] = {0, 128, 255};
  std::vector<uint8_t> values(count);
  for (auto& v : values) {
    if (rng() & 1) v = bits == 4 ? k4[rng() % 4] : k8[rng() % 3];
    else v = static_cast<uint8_t>(bits == 4 ? rng() % 17 : rng() % 256);
  }
  return values;
}

// FP8 codes: uniform bytes without NaN, with the special values planted: subnormals, +-448,
// +-0 in every row; NaN in the rows listed.
inline void plant_fp8(std::vector<uint8_t>& codes, uint32_t n, uint32_t k, std::mt19937_64& rng,
                      const std::vector<uint32_t>& nan_rows) {
  for (auto& c : codes)
    if ((c & 0x7f) == 0x7f) c = static_cast<uint8_t>(c ^ 1);
  static constexpr uint8_t kSpecial[] = {0x01, 0x81, 0x07, 0x85, 0x7e, 0xfe, 0x00, 0x80};
  for (size_t row = 0; row < codes.size() / k; ++row)
    for (uint8_t special : kSpecial) codes[row * k + rng() % k] = special;
  for (uint32_t row : nan_rows)
    if (row < n) codes[size_t{row} * k + rng() % k] = (rng() & 1) ? 0x7f : 0xff;
}

// bf16 / f16 weights: bf16 uniform in [-1, 1), f16 below, with values planted in every row: large
// ones (bf16 128 and -255, f16 +-255.9; larger would hide the other terms under the budget),
// tiny ones (bf16 +-2^-100; the f16 subnormals 2^-24 and -(2^-14 - 2^-24)) and -0.
inline std::vector<uint8_t> random_w16(Fam fam, std::mt19937_64& rng, size_t rows, uint32_t k) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<uint16_t> w(rows * k);
  for (auto& v : w)  // f16: every mantissa bit, magnitudes 2^-14 .. 2 (bf16 could not hold them)
    v = fam == Fam::bf16 ? to_bf16(dist(rng))
                         : static_cast<uint16_t>((rng() & 0x8000) | (1 + rng() % 15) << 10 | (rng() & 0x3ff));
  static constexpr uint16_t kBf16[] = {0x4300, 0xc37f, 0x0d80, 0x8d80, 0x8000};
  static constexpr uint16_t kF16[] = {0x5bff, 0xdbff, 0x0001, 0x83ff, 0x8000};
  for (size_t row = 0; row < rows; ++row) {
    if (fam == Fam::bf16)
      for (uint16_t special : kBf16) w[row * k + rng() % k] = special;
    else
      for (uint16_t special : kF16) w[row * k + rng() % k] = special;
  }
  std::vector<uint8_t> bytes(w.size() * 2);
  std::memcpy(bytes.data(), w.data(), bytes.size());
  return bytes;
}

// A problem of `count` stacked matrices; rows: m for one matrix, else per-matrix counts (the
// grouped kernels' offsets).
inline QuantProblem make_quant(Fam fam, uint32_t m, uint32_t n, uint32_t k, uint32_t group, uint64_t seed,
                               const std::vector<int32_t>& rows_per_matrix = {}) {
  std::mt19937_64 rng(seed);
  const FamInfo f = info(fam);
  QuantProblem p;
  p.fam = fam;
  p.n = n;
  p.k = k;
  p.group = f.fp8 || f.w16 ? 128 : group;
  p.count = rows_per_matrix.empty() ? 1 : static_cast<uint32_t>(rows_per_matrix.size());
  p.offsets = {0};
  for (int32_t r : rows_per_matrix) p.offsets.push_back(p.offsets.back() + r);
  p.m = rows_per_matrix.empty() ? m : static_cast<uint32_t>(p.offsets.back());
  p.codes.resize(size_t{p.count} * n * k * f.bits / 8);
  for (auto& c : p.codes) c = static_cast<uint8_t>(rng());
  if (f.fp8) plant_fp8(p.codes, p.count * n, k, rng, {3, 100});
  if (f.w16) p.codes = random_w16(fam, rng, size_t{p.count} * n, k);
  const size_t groups = size_t{p.count} * n * (k / p.group);
  if (!f.w16) p.scales = random_f32_scales(rng, groups);
  if (f.zeros) p.zeros = random_zeros(rng, groups, f.bits);
  if (f.int8) {
    p.xq.resize(size_t{p.m} * k);
    for (auto& v : p.xq) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    std::uniform_real_distribution<float> scale(1e-3f, 1e-1f);
    p.xscale.resize(p.m);
    for (auto& s : p.xscale) s = scale(rng);
    // Extremes: a row of zeros (its scale 0 too, as quantize_int8 writes it), a row of -127
    // against a weight row of the largest code with zero point 0 (for 8-bit codes the u8 255 x
    // s8 -127 products whose pairs overflow a saturating 16-bit sum).
    if (p.m > 1) {
      for (uint32_t t = 0; t < k; ++t) p.xq[t] = 0;
      p.xscale[0] = 0.0f;
      for (uint32_t t = 0; t < k; ++t) p.xq[size_t{p.m - 1} * k + t] = -127;
      for (size_t b = 0; b < size_t{k} * f.bits / 8; ++b) p.codes[b] = 0xff;
      for (uint32_t g = 0; g < k / p.group; ++g) p.zeros[g] = 0;
    }
  } else {
    p.x = random_bf16(rng, size_t{p.m} * k, -1.0, 1.0);
  }
  p.ref.resize(size_t{p.m} * n);
  p.absum.resize(size_t{p.m} * n);
  if (rows_per_matrix.empty()) {
    quant_reference(p, 0, 0, p.m);
  } else {
    for (uint32_t e = 0; e < p.count; ++e)
      quant_reference(p, e, static_cast<uint32_t>(p.offsets[e]), static_cast<uint32_t>(rows_per_matrix[e]));
  }
  return p;
}

}  // namespace cpu_test
