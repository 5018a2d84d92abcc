// SPDX-License-Identifier: MIT OR Apache-2.0
#include "core/numeric.hpp"

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

float e4m3_to_f32(uint8_t bits) noexcept {
  const float sign = (bits & 0x80u) ? -1.0f : 1.0f;
  const uint32_t exponent = (bits >> 3) & 0xfu;
  const uint32_t mantissa = bits & 0x7u;
  if (exponent == 0xfu && mantissa == 0x7u) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m * 2^-9
  return sign * std::ldexp(static_cast<float>(8 + mantissa), static_cast<int>(exponent) - 10);
}

uint8_t f32_to_e4m3(float value) noexcept {
  if (std::isnan(value)) return 0x7f;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float magnitude = std::fabs(value);
  if (magnitude >= 448.0f) return static_cast<uint8_t>(sign | 0x7e);
  // Every E4M3 magnitude is a multiple of its binade's step: 2^-9 below 2^-6, else 2^(e-3).
  const int exponent = magnitude < 0x1.0p-6f ? -6 : std::ilogb(magnitude);
  const float step = std::ldexp(1.0f, exponent - 3);
  const float units = std::nearbyint(magnitude / step);  // exact division by a power of two; ties to even
  const float rounded = units * step;
  if (rounded >= 448.0f) return static_cast<uint8_t>(sign | 0x7e);
  if (rounded < 0x1.0p-6f) return static_cast<uint8_t>(sign | static_cast<uint8_t>(rounded * 512.0f));
  const int e = std::ilogb(rounded);
  const auto m = static_cast<uint32_t>(std::ldexp(rounded, 3 - e)) - 8;  // 0..7
  return static_cast<uint8_t>(sign | ((e + 7) << 3) | m);
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
