// SPDX-License-Identifier: MIT OR Apache-2.0
// W4A16 weights (design.md section 8, docs/kernels.md): a matrix W[N, K] of 4-bit codes q in 0..15
// with value (q - 8) * s, one fp16 scale s per group of 128 along K. Codes are packed 8 per u32
// along K, lowest nibble = lowest k: qweight u32[N][K/8], scales f16[N][K/128]. A stack of such
// matrices (MoE experts) is stored expert-major: u32[E][N][K/8], f16[E][N][K/128].
//
// K must be a multiple of 128; every constructor checks it and throws metrale::Error
// (invalid_argument) naming the tensor and K.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

inline constexpr uint32_t kW4a16GroupSize = 128;
inline constexpr uint32_t kW4a16CodesPerWord = 8;

// Read-only view of one [N, K] W4A16 matrix (one expert of a stack, or a plain matrix).
struct W4a16View {
  std::string_view name;
  uint32_t n = 0;
  uint32_t k = 0;
  std::span<const uint32_t> qweight;  // [n][k/8]
  std::span<const uint16_t> scales;   // [n][k/128], fp16 bits

  uint32_t code(uint32_t row, uint32_t col) const noexcept {
    return (qweight[size_t{row} * (k / 8) + col / 8] >> (4 * (col % 8))) & 0xfu;
  }
  float scale(uint32_t row, uint32_t group) const noexcept;
  // (q - 8) * s, exact in double (and in f32).
  double value(uint32_t row, uint32_t col) const noexcept;
  // The whole row dequantized: out.size() == k.
  void dequantize_row(uint32_t row, std::span<double> out) const;
};

// One W4A16 matrix or a stack of `batch` matrices of the same shape (batch == 1: plain).
struct W4a16Matrix {
  std::string name;  // the tensor's name, used in every message about it
  uint32_t batch = 1;
  uint32_t n = 0;
  uint32_t k = 0;
  std::vector<uint32_t> qweight;
  std::vector<uint16_t> scales;

  size_t words_per_matrix() const noexcept { return size_t{n} * (k / 8); }
  size_t scales_per_matrix() const noexcept { return size_t{n} * (k / kW4a16GroupSize); }
  size_t qweight_bytes() const noexcept { return qweight.size() * sizeof(uint32_t); }
  size_t scales_bytes() const noexcept { return scales.size() * sizeof(uint16_t); }
  size_t bytes() const noexcept { return qweight_bytes() + scales_bytes(); }
  size_t bytes_per_matrix() const noexcept { return words_per_matrix() * 4 + scales_per_matrix() * 2; }
  W4a16View view(uint32_t index = 0) const;
  // Sizes agree with the shape; throws Error naming the tensor otherwise.
  void validate() const;
};

// Throws Error(invalid_argument) naming the tensor when the shape is not a valid W4A16 matrix.
void check_w4a16_shape(std::string_view name, uint64_t n, uint64_t k, uint64_t batch = 1);

// A zero-filled (all codes 8, all scales 0) matrix of that shape, checked.
W4a16Matrix w4a16_zeros(std::string name, uint32_t n, uint32_t k, uint32_t batch = 1);

// Symmetric group-128 quantization as GPTQ does it: s = fp16(max|w| * 2/15),
// q = clamp(round_half_even(w / s) + 8, 0, 15). `w` is row-major [batch][n][k].
W4a16Matrix quantize_w4a16(std::string name, uint32_t n, uint32_t k, std::span<const float> w,
                           uint32_t batch = 1);
W4a16Matrix quantize_w4a16_bf16(std::string name, uint32_t n, uint32_t k, std::span<const uint16_t> w,
                                uint32_t batch = 1);
// Dequantized copy, row-major [batch][n][k] (f32 holds every value exactly).
std::vector<float> dequantize_w4a16(const W4a16Matrix& matrix);

// Deterministic synthetic weights straight from the seed: codes uniform in 0..15, scales chosen
// so that a dot product over K inputs of magnitude ~1 stays ~1. Fast: no f32 matrix is built.
W4a16Matrix synthetic_w4a16(std::string name, uint32_t n, uint32_t k, uint64_t seed, uint32_t batch = 1);

}  // namespace metrale::layers
