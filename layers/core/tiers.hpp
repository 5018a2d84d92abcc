// SPDX-License-Identifier: MIT OR Apache-2.0
// Quantization tiers a layer runs under (docs/quantization.md): the weight format of its
// projections (quant_matrix.hpp's WeightFormat) and how its activations enter them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace metrale::layers {

// Activations of a projection: bf16 as stored, or quantized at run time by the quant module's
// quantizers (docs/kernels.md), with the scales ActivationScaling below describes.
enum class ActivationQuant : uint8_t { bf16, int8, fp8 };
const char* activation_quant_name(ActivationQuant a) noexcept;  // "bf16", "int8", "fp8"
std::optional<ActivationQuant> parse_activation_quant(std::string_view text) noexcept;

// How an int8/fp8 tier's quantizer sets its scales (docs/quantization.md, "Activation scales"):
// one per row or one per 128 columns of a row, in the arithmetic of the tool that wrote the
// checkpoint, so that the codes are the ones that tool computes.
enum class ScaleArithmetic : uint8_t {
  f32,   // scale max|x| / 127 (int8) or / 448 (fp8) in f32, x / scale in f32, int8 codes -127..127
         // (metrale's own contract; vLLM's kernels and transformers' block-FP8 quantizer compute so)
  bf16,  // torch in bf16, as compressed-tensors quantizes: scale bf16(max|x| / 127.5) (int8) or
         // bf16(max|x| / 448), at least 2^-23; x / scale rounded to bf16; int8 codes -128..127
};
struct ActivationScaling {
  bool group128 = false;  // one scale per 128 columns (fp8 only: block-FP8 checkpoints)
  // One stored scale per projection (the checkpoint's input_scale, a matrix's input_scales),
  // with bf16 arithmetic: compressed-tensors' static presets.
  bool static_tensor = false;
  ScaleArithmetic arithmetic = ScaleArithmetic::f32;
  bool operator==(const ActivationScaling&) const = default;
};
// "per row", "per 128 columns, bf16 arithmetic", ...
std::string activation_scaling_name(ActivationScaling scaling);
// Columns per scale for rows of k values (a static scale serves the whole row).
inline uint32_t scale_width(ActivationScaling scaling, uint32_t k) noexcept { return scaling.group128 ? 128 : k; }

// The scale a group of values with maximum magnitude `amax` (a bf16 value) gets.
float activation_scale(ActivationQuant a, ScaleArithmetic arithmetic, double amax) noexcept;
// A row of k bf16 values (exact in double) quantized as the tier's kernels do it: per group of
// scale_width columns, the group's scale (written to scales[k / width]) and each value's code;
// writes the dequantized values (code * scale, exact in double).
void quantize_row(ActivationQuant a, ActivationScaling scaling, const double* x, uint32_t k, double* dequantized,
                  float* scales) noexcept;
// n values quantized with a given scale (the reference's what-if for a neighbouring scale).
void quantize_with_scale(ActivationQuant a, ScaleArithmetic arithmetic, const double* x, uint32_t n, float scale,
                         double* dequantized) noexcept;

}  // namespace metrale::layers
