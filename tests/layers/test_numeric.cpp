// SPDX-License-Identifier: MIT OR Apache-2.0
// bf16 / fp16 conversions: round to nearest even, specials, and every fp16 value round-trips.
#include <doctest/doctest.h>

#include "core/numeric.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

using namespace metrale::layers;

TEST_CASE("f32 -> bf16 rounds to nearest, ties to even") {
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  // 1 + 2^-8 is exactly half way between 1 and 1 + 2^-7: ties go to the even (1.0).
  CHECK(f32_to_bf16(std::bit_cast<float>(0x3f808000u)) == 0x3f80);
  // 1 + 3 * 2^-8 is half way between 1 + 2^-7 (odd) and 1 + 2^-6: rounds up to even.
  CHECK(f32_to_bf16(std::bit_cast<float>(0x3f818000u)) == 0x3f82);
  // Just above the tie rounds up.
  CHECK(f32_to_bf16(std::bit_cast<float>(0x3f808001u)) == 0x3f81);
  CHECK(f32_to_bf16(-2.5f) == 0xc020);
  CHECK(f32_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds past the largest bf16
  const uint16_t nan = f32_to_bf16(std::numeric_limits<float>::quiet_NaN());
  CHECK(std::isnan(bf16_to_f32(nan)));
  // A signalling NaN whose payload sits only in the dropped bits must not become infinity.
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7f800001u)))));
}

TEST_CASE("f64 -> bf16 rounds the double once") {
  // 1 + 2^-8 + 2^-40 is above the tie: correctly rounded it goes up. Through f32 it would first
  // become 1 + 2^-8 (the tie) and then round down to 1: the double-rounding error this avoids.
  const double above_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  CHECK(f64_to_bf16(above_tie) == 0x3f81);
  CHECK(f32_to_bf16(static_cast<float>(above_tie)) == 0x3f80);
  CHECK(f64_to_bf16(1.0 + std::ldexp(1.0, -8)) == 0x3f80);  // exact tie: even
  CHECK(f64_to_bf16(-3.0) == f32_to_bf16(-3.0f));
  CHECK(f64_to_bf16(1e300) == 0x7f80);
  CHECK(f64_to_bf16(-1e300) == 0xff80);
  CHECK(f64_to_bf16(0.0) == 0);
  // Agrees with f32_to_bf16 wherever the double is an f32.
  for (uint32_t bits = 0x00800000u; bits < 0x7f000000u; bits += 0x00012345u) {
    const float f = std::bit_cast<float>(bits);
    REQUIRE(f64_to_bf16(static_cast<double>(f)) == f32_to_bf16(f));
  }
}

TEST_CASE("every fp16 value round-trips through f32") {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const float f = f16_to_f32(static_cast<uint16_t>(bits));
    if (std::isnan(f)) {
      CHECK(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    REQUIRE(f32_to_f16(f) == bits);
  }
}

TEST_CASE("f32 -> fp16 rounding, subnormals and overflow") {
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);   // half of it: tie to even (0)
  CHECK(f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);   // 1.5 units: tie to even (2)
  CHECK(f32_to_f16(65504.0f) == 0x7bff);
  CHECK(f32_to_f16(65519.0f) == 0x7bff);
  CHECK(f32_to_f16(65520.0f) == 0x7c00);  // the tie above the largest finite rounds to infinity
  CHECK(f32_to_f16(-1e9f) == 0xfc00);
  // 1 + 2^-11 is the tie between 1 and 1 + 2^-10: even (1).
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  // The largest subnormal rounds up into the smallest normal correctly.
  CHECK(f32_to_f16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)) == 0x0400);
}

TEST_CASE("bf16 ulp") {
  CHECK(bf16_ulp(1.0) == std::ldexp(1.0, -7));
  CHECK(bf16_ulp(1.9) == std::ldexp(1.0, -7));
  CHECK(bf16_ulp(-2.0) == std::ldexp(1.0, -6));
  CHECK(bf16_ulp(0.0) > 0.0);
}
