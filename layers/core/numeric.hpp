// SPDX-License-Identifier: MIT OR Apache-2.0
// The one place that converts between f32/f64 and the 16-bit float formats the layers store:
// bf16 (activations, outputs), IEEE fp16 (W4A16 scales) and FP8 E4M3 (FP8 weights). Every narrowing rounds to nearest,
// ties to even; NaN stays NaN (quiet), overflow becomes infinity.
#pragma once

#include <cstdint>
#include <span>

namespace metrale::layers {

float bf16_to_f32(uint16_t bits) noexcept;
uint16_t f32_to_bf16(float value) noexcept;
// Rounds the exact double once (no double rounding through f32).
uint16_t f64_to_bf16(double value) noexcept;

float f16_to_f32(uint16_t bits) noexcept;
uint16_t f32_to_f16(float value) noexcept;

// OCP FP8 E4M3 ("e4m3fn"): bias 7, 3 mantissa bits, subnormals, no infinities, 0x7f/0xff NaN.
float e4m3_to_f32(uint8_t bits) noexcept;
// Nearest E4M3 (ties to even), saturating at +-448; NaN stays NaN.
uint8_t f32_to_e4m3(float value) noexcept;

// One unit in the last place of a bf16 value of this magnitude (2^-7 relative to its exponent).
double bf16_ulp(double value) noexcept;

void bf16_to_f32(std::span<const uint16_t> in, std::span<float> out);
void f32_to_bf16(std::span<const float> in, std::span<uint16_t> out);

}  // namespace metrale::layers
