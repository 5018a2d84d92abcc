// SPDX-License-Identifier: MIT OR Apache-2.0
// Constructing W4A16 weights (format w4a16 of quant_matrix.hpp, docs/kernels.md): a matrix W[N, K]
// of 4-bit codes q in 0..15 with value (q - 8) * s, one fp16 scale s per group of 128 along K.
// K must be a multiple of 128; every constructor checks it and throws metrale::Error
// (invalid_argument) naming the tensor and K.
#pragma once

#include "core/quant_matrix.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace metrale::layers {

// A zero-filled (all codes 8, all scales 0) matrix of that shape, checked.
QuantMatrix w4a16_zeros(std::string name, uint32_t n, uint32_t k, uint32_t batch = 1);

// Symmetric group-128 quantization as GPTQ does it: s = fp16(max|w| * 2/15),
// q = clamp(round_half_even(w / s) + 8, 0, 15). `w` is row-major [batch][n][k].
QuantMatrix quantize_w4a16(std::string name, uint32_t n, uint32_t k, std::span<const float> w,
                           uint32_t batch = 1);
QuantMatrix quantize_w4a16_bf16(std::string name, uint32_t n, uint32_t k, std::span<const uint16_t> w,
                                uint32_t batch = 1);
// Dequantized copy of any format, row-major [batch][n][k], in stored column order (f32 holds
// every value exactly).
std::vector<float> dequantize(const QuantMatrix& matrix);

// Deterministic synthetic weights straight from a seed value: codes uniform in 0..15, scales chosen
// so that a dot product over K inputs of magnitude ~1 stays ~1. Fast: no f32 matrix is built.
QuantMatrix synthetic_w4a16(std::string name, uint32_t n, uint32_t k, uint64_t seed, uint32_t batch = 1);

}  // namespace metrale::layers
