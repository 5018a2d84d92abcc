// SPDX-License-Identifier: MIT OR Apache-2.0
// Quantization tiers a layer runs under (docs/quantization.md): the weight format of its
// projections (quant_matrix.hpp's WeightFormat) and how its activations enter them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace metrale::layers {

// Activations of a projection: bf16 as stored, or quantized per row (token) at run time as
// quant/quantize_int8 and quant/quantize_fp8 define it (docs/kernels.md).
enum class ActivationQuant : uint8_t { bf16, int8, fp8 };
const char* activation_quant_name(ActivationQuant a) noexcept;  // "bf16", "int8", "fp8"
std::optional<ActivationQuant> parse_activation_quant(std::string_view text) noexcept;

// One row quantized as the contract says: scale = max|x| / 127 (int8) or / 448 (fp8) in f32, each
// value the nearest code to the f32 quotient x / scale. Writes the dequantized values
// (code * scale, exact in double) and returns the scale. `x` holds bf16 values (exact in f32).
float quantize_row(ActivationQuant a, const double* x, uint32_t k, double* dequantized) noexcept;
// The same row quantized with a given scale (the reference's what-if for a neighbouring scale).
void quantize_row_with_scale(ActivationQuant a, const double* x, uint32_t k, float scale, double* dequantized) noexcept;

}  // namespace metrale::layers
