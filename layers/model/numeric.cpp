// SPDX-License-Identifier: MIT OR Apache-2.0
#include "numeric.hpp"

#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace metrale::layers {

float bf16_to_f32(uint16_t bits) noexcept { return std::bit_cast<float>(uint32_t{bits} << 16); }

uint16_t f32_to_bf16(float value) noexcept {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // keep sign, force quiet
  // Adding 0x7fff plus the lowest kept bit rounds to nearest with ties to even; a carry into the
  // exponent is correct (it rounds up to the next binade, or to infinity).
  uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7fffu + lsb) >> 16);
}

uint16_t f64_to_bf16(double value) noexcept {
  if (std::isnan(value)) return f32_to_bf16(static_cast<float>(value));
  // Truncate to f32 toward zero and remember whether anything was dropped (sticky), then round
  // those bits once to bf16: that is the correctly rounded result of the double.
  float nearest = static_cast<float>(value);
  float truncated = nearest;
  if (std::isinf(nearest) && std::isfinite(value)) {
    truncated = std::copysign(std::numeric_limits<float>::max(), static_cast<float>(value));
  } else if (std::fabs(static_cast<double>(nearest)) > std::fabs(value)) {
    truncated = std::nextafter(nearest, 0.0f);
  }
  bool sticky = static_cast<double>(truncated) != value;
  uint32_t bits = std::bit_cast<uint32_t>(truncated);
  uint32_t low = bits & 0xffffu;
  uint32_t high = bits >> 16;
  bool up = low > 0x8000u || (low == 0x8000u && (sticky || (high & 1u))) ;
  return static_cast<uint16_t>(high + (up ? 1u : 0u));
}

float f16_to_f32(uint16_t bits) noexcept {
  uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in f32.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float value) noexcept {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  if (std::isnan(value)) return static_cast<uint16_t>(sign | 0x7e00u | ((bits >> 13) & 0x3ffu));
  float magnitude = std::fabs(value);
  if (magnitude >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (magnitude < 6.103515625e-05f) {
    // Subnormal range: the result is round(magnitude / 2^-24); nearbyint rounds ties to even
    // under the default rounding mode and the product is exact.
    float units = std::nearbyint(magnitude * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
  }
  uint32_t m = std::bit_cast<uint32_t>(magnitude);
  uint32_t lsb = (m >> 13) & 1u;
  m += 0xfffu + lsb;  // round to nearest even at bit 13
  uint32_t exponent = (m >> 23) - 112u;
  uint32_t mantissa = (m >> 13) & 0x3ffu;
  return static_cast<uint16_t>(sign | (exponent << 10) | mantissa);
}

double bf16_ulp(double value) noexcept {
  double magnitude = std::fabs(value);
  if (magnitude < std::ldexp(1.0, -126)) return std::ldexp(1.0, -133);  // bf16 subnormal spacing
  int exponent = std::ilogb(magnitude);
  return std::ldexp(1.0, exponent - 7);
}

void bf16_to_f32(std::span<const uint16_t> in, std::span<float> out) {
  if (in.size() != out.size()) throw std::invalid_argument("bf16_to_f32: size mismatch");
  for (size_t i = 0; i < in.size(); ++i) out[i] = bf16_to_f32(in[i]);
}

void f32_to_bf16(std::span<const float> in, std::span<uint16_t> out) {
  if (in.size() != out.size()) throw std::invalid_argument("f32_to_bf16: size mismatch");
  for (size_t i = 0; i < in.size(); ++i) out[i] = f32_to_bf16(in[i]);
}

}  // namespace metrale::layers
