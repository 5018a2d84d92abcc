// SPDX-License-Identifier: MIT OR Apache-2.0
// Scalar number formats of the kernels: bf16 <-> f32 (round-to-nearest-even on store),
// f16 -> f32 and OCP FP8 E4M3 -> f32 (exact, subnormals included), f32 -> E4M3 (nearest).
//
// Everything here has internal linkage on purpose: this header is included by translation units
// compiled with -mavx2 / -mavx512f. An inline function with external linkage would be emitted
// as a COMDAT in each of them and the linker could keep the AVX-512 copy for the baseline code,
// which then faults on a CPU without AVX-512. Internal linkage gives every TU its own copy.
#pragma once

#include <cstdint>
#include <cstring>

namespace metrale::cpu {
namespace {

inline float bf16_to_f32(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

// Round to nearest, ties to even; NaN stays NaN (quiet), infinities stay infinite.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float f16_to_f32(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1fu) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf / NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // 127 - 15 = 112
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalise the mantissa into an f32 exponent.
    exponent = 113u;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// E4M3 ("e4m3fn"): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal;
// 0x7f and 0xff are NaN, there are no infinities.
inline float e4m3_to_f32(uint8_t code) {
  const uint32_t exponent = (code >> 3) & 0xfu, mantissa = code & 7u;
  float magnitude;
  if ((code & 0x7fu) == 0x7fu) {
    magnitude = __builtin_nanf("");
  } else if (exponent == 0) {
    magnitude = static_cast<float>(mantissa) * 0x1p-9f;
  } else {
    const uint32_t bits = ((exponent + 120u) << 23) | (mantissa << 20);  // 127 - 7 = 120
    std::memcpy(&magnitude, &bits, sizeof magnitude);
  }
  return (code & 0x80u) ? -magnitude : magnitude;
}

// The E4M3 code nearest to `value` (ties to even), saturating to +-448 as the GPUs' satfinite
// conversion does; a negative value that rounds to zero keeps its sign (0x80); NaN gives 0x7f.
// Between 2^-6 and 448 the f32 bits round to 3 mantissa bits as integers (a carry moves into
// the exponent); every f32 gives the code of the frexp/ldexp form (checked over all 2^32).
inline uint8_t f32_to_e4m3(float value) {
  if (value != value) return 0x7f;
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  float magnitude;
  std::memcpy(&magnitude, &abs_bits, sizeof magnitude);
  if (magnitude >= 448.0f) return static_cast<uint8_t>(sign | 0x7e);
  // Below 2^-6 the codes are multiples of 2^-9, and code 8 (2^-6) is where the normals begin.
  if (magnitude < 0x1p-6f) return static_cast<uint8_t>(sign | static_cast<uint8_t>(__builtin_nearbyintf(magnitude * 512.0f)));
  const uint32_t rounded = abs_bits + 0x7ffffu + ((abs_bits >> 20) & 1u);  // ties to even
  return static_cast<uint8_t>(sign | ((rounded >> 20) - (120u << 3)));      // f32 bias 127, E4M3's 7
}

inline uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
inline uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

}  // namespace
}  // namespace metrale::cpu
