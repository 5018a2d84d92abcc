// SPDX-License-Identifier: MIT OR Apache-2.0
// Quantized weight matrices on the host, in the canonical layouts of docs/kernels.md: one
// struct for every weight format the layers run, W[N, K] (N outputs, K inputs), or a stack of
// `batch` such matrices (MoE experts), expert-major.
//
//   w4a16    4-bit codes, value (q - 8) * s, fp16 scale per group of 128 (the W4A16 family)
//   w4_zp    4-bit codes, value (q - z) * s, f32 scale and u8 zero point per group of 32/64/128
//   w8_zp    8-bit codes, value (q - z) * s, f32 scale and u8 zero point per group of 32/64/128
//   fp8      E4M3 codes,  value e4m3(q) * s, f32 scale per group of 128
//   bf16     the bf16 values themselves (an unquantized checkpoint's weights), no scales
//   f16      the f16 values themselves, no scales
//
// Codes are packed along K into u32 words, lowest bits = lowest k (8 per word for 4 bits, 4 for
// 8 bits, 2 for 16: the row-major bytes a checkpoint stores). An act-order matrix (GPTQ desc_act) is stored with its K columns sorted by group; its
// `perm` says which input column each stored column reads. Every constructor and loader checks
// shapes and throws metrale::Error (invalid_argument) naming the tensor.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

inline constexpr uint32_t kW4a16GroupSize = 128;
inline constexpr uint32_t kW4a16CodesPerWord = 8;

enum class WeightFormat : uint8_t { w4a16, w4_zp, w8_zp, fp8, bf16, f16 };
// The format of the project's own weights (synthetic, `metrale run --save-weights`), and so of a
// request that names none.
inline constexpr WeightFormat kDefaultWeightFormat = WeightFormat::w4a16;
// The canonical layout's name: "w4a16-nk-g128", "w4-zp", "w8-zp", "fp8-e4m3", "bf16-nk", "f16-nk".
const char* weight_format_name(WeightFormat format) noexcept;
uint32_t weight_format_bits(WeightFormat format) noexcept;  // 4, 8 or 16
bool weight_format_has_zeros(WeightFormat format) noexcept;
bool weight_format_has_scales(WeightFormat format) noexcept;  // all but bf16 and f16

// Read-only view of one [N, K] matrix (one expert of a stack, or a plain matrix).
struct QuantView {
  std::string_view name;
  WeightFormat format = WeightFormat::w4a16;
  uint32_t n = 0;
  uint32_t k = 0;
  uint32_t group = kW4a16GroupSize;
  std::span<const uint32_t> qweight;  // [n][k * bits / 32]
  std::span<const uint16_t> scales;   // w4a16: fp16 bits [n][k/128]
  std::span<const float> scales32;    // other formats: [n][k/group]
  std::span<const uint8_t> zeros;     // zero-point formats: [n][k/group]
  std::span<const int32_t> perm;      // act-order: [k]; empty: identity
  float input_scale = 0;              // the static activation scale; 0: none

  uint32_t code(uint32_t row, uint32_t col) const noexcept;
  // The scale of (row, group), as f32 (exact for fp16).
  float scale(uint32_t row, uint32_t group_index) const noexcept;
  // The weight's value, exact in double.
  double value(uint32_t row, uint32_t col) const noexcept;
  // The whole row dequantized: out.size() == k.
  void dequantize_row(uint32_t row, std::span<double> out) const;
  // The input column stored column `col` multiplies (perm[col], or col).
  uint32_t input_column(uint32_t col) const noexcept {
    return perm.empty() ? col : static_cast<uint32_t>(perm[col]);
  }
};

// One matrix or a stack of `batch` matrices of the same shape and format (batch == 1: plain).
struct QuantMatrix {
  std::string name;  // the tensor's name, used in every message about it
  WeightFormat format = WeightFormat::w4a16;
  uint32_t batch = 1;
  uint32_t n = 0;
  uint32_t k = 0;
  uint32_t group = kW4a16GroupSize;  // along K: 128 for w4a16, fp8, bf16, f16; 32, 64 or 128 otherwise
  std::vector<uint32_t> qweight;     // codes, [batch][n][k * bits / 32]
  std::vector<uint16_t> scales;      // w4a16 only: fp16 bits [batch][n][k/128]
  std::vector<float> scales32;       // w4_zp, w8_zp, fp8: [batch][n][k/group]
  std::vector<uint8_t> zeros;        // w4_zp, w8_zp: [batch][n][k/group]
  std::vector<int32_t> perm;         // act-order: [batch][k]; empty: none
  // Static activation scales: the scale each matrix's inputs are quantized with (a checkpoint's
  // input_scale), [batch]; empty: the activation tier computes its own.
  std::vector<float> input_scales;

  uint32_t bits() const noexcept { return weight_format_bits(format); }
  uint32_t groups() const noexcept { return k / group; }
  size_t words_per_matrix() const noexcept { return size_t{n} * k * bits() / 32; }
  size_t scales_per_matrix() const noexcept { return size_t{n} * groups(); }
  // Bytes of each tensor per matrix, as the kernels of docs/kernels.md address them.
  size_t qweight_bytes_per_matrix() const noexcept { return words_per_matrix() * 4; }
  size_t scale_bytes_per_matrix() const noexcept;
  size_t zero_bytes_per_matrix() const noexcept;
  size_t bytes_per_matrix() const noexcept;  // codes + scales + zeros (not perm)
  size_t qweight_bytes() const noexcept { return qweight.size() * sizeof(uint32_t); }
  size_t scales_bytes() const noexcept { return size_t{batch} * scale_bytes_per_matrix(); }
  size_t bytes() const noexcept { return size_t{batch} * bytes_per_matrix() + perm.size() * sizeof(int32_t); }
  QuantView view(uint32_t index = 0) const;
  // Sizes agree with the shape and format, perm is a permutation per matrix; throws Error naming
  // the tensor otherwise.
  void validate() const;
};

// Throws Error(invalid_argument) naming the tensor when the shape cannot hold `format` with `group`.
void check_quant_shape(std::string_view name, WeightFormat format, uint64_t n, uint64_t k, uint64_t batch,
                       uint64_t group);
// The W4A16 form of the check (group 128).
void check_w4a16_shape(std::string_view name, uint64_t n, uint64_t k, uint64_t batch = 1);

// A zero-filled matrix of that shape (codes at the zero point, scales 0), checked.
QuantMatrix quant_zeros(std::string name, WeightFormat format, uint32_t n, uint32_t k, uint32_t batch = 1,
                        uint32_t group = kW4a16GroupSize);

// The same weights in the w4-zp layout: fp16 scales widened to f32, every zero point 8 (exact).
QuantMatrix to_w4_zp(const QuantMatrix& w4a16);

// Assembling checkpoints' projections (plain matrices, batch 1):
// the rows of `top` then those of `bottom` (gate then up), which share K, format, group and
// permutation (Error(invalid_argument) naming both otherwise);
// Static activation scales must agree: the fused projection quantizes its input once (a
// Refusal naming both tensors otherwise).
QuantMatrix concat_rows(std::string name, const QuantMatrix& top, const QuantMatrix& bottom);
// the rows reordered: row i of the result is row order[i] of `m`;
void reorder_rows(QuantMatrix& m, std::span<const int32_t> order);
// the rows `rows` of a plain matrix, in that order, as their own matrix (same K, format, group
// and permutation);
QuantMatrix select_rows(std::string name, const QuantMatrix& m, std::span<const uint32_t> rows);
// matrices of one shape and format as a stack (MoE experts); a matrix without a permutation gets
// the identity when others have one.
QuantMatrix stack_matrices(std::string name, std::vector<QuantMatrix> matrices);

}  // namespace metrale::layers
