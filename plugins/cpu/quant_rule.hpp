// SPDX-License-Identifier: MIT OR Apache-2.0
// The activation quantizers of docs/kernels.md ("Activation quantization") as one rule per
// code type and arithmetic: the scale of a group from its largest |x|, and the code of each x.
// The baseline bodies apply it element by element; the SIMD tiers (quant_avx512.hpp) take its
// scale and bounds and reproduce its codes bit for bit.
//
// Internal linkage on purpose (see numeric.hpp).
#pragma once

#include <cmath>

#include "numeric.hpp"
#include "quant_calls.hpp"

namespace metrale::cpu {
namespace {

enum class Arithmetic : uint8_t {
  f32,   // s = a / 127 (int8) or a / 448 in f32, x / s in f32, int8 codes -127..127; s = 0 when a = 0
  bf16,  // torch in bf16 (compressed-tensors): s = bf16(a / 127.5) or bf16(a / 448), at least
         // 2^-23; x / s rounded to bf16; int8 codes -128..127
};

inline float to_bf16_value(float v) { return bf16_to_f32(f32_to_bf16(v)); }

template <Codes kCodes, Arithmetic kArith>
struct QuantRule {
  static constexpr bool kInt = kCodes != Codes::fp8;
  static constexpr float kDivisor = kInt ? (kArith == Arithmetic::f32 ? 127.0f : 127.5f) : 448.0f;
  // The bounds are bf16 values: clamping before or after the bf16 rounding gives the same code.
  static constexpr float kLow = kInt ? (kArith == Arithmetic::f32 ? -127.0f : -128.0f) : -448.0f;
  static constexpr float kHigh = kInt ? 127.0f : 448.0f;

  static float scale(float peak) {
    if constexpr (kArith == Arithmetic::f32) return peak / kDivisor;
    const float s = to_bf16_value(peak / kDivisor);
    return s < 0x1p-23f ? 0x1p-23f : s;  // torch.clamp(min=finfo(float32).eps)
  }
  // The code of x under scale s (s = 0: every code 0). A NaN quotient, from a row holding NaN
  // or infinities, becomes the lowest code.
  static uint8_t code(float x, float s) {
    if (s == 0.0f) return 0;
    float v = x / s;
    if constexpr (kArith == Arithmetic::bf16) v = to_bf16_value(v);
    v = !(v >= kLow) ? kLow : v > kHigh ? kHigh : v;
    if constexpr (kInt) return static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(v)));  // ties to even
    return f32_to_e4m3(v);
  }
};

}  // namespace
}  // namespace metrale::cpu
