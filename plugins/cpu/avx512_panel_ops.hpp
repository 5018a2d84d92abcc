// SPDX-License-Identifier: MIT OR Apache-2.0
// What the two AVX-512 tiers' panel Isas (w4a16_avx512.cpp, w4a16_avx512bf16.cpp) share: 16
// lanes of codes, f32 accumulators, f16 group scales. Each Isa derives from it and adds its own
// operand types, decode, broadcast and dot step (see w4a16_panel.hpp for the interface).
// Internal linkage on purpose (see numeric.hpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace metrale::cpu {
namespace {

struct Avx512PanelOps {
  using vf = __m512;
  using vu = __m512i;
  static constexpr uint32_t kLanes = 16;

  static __mmask16 first(uint32_t valid) { return static_cast<__mmask16>((1u << valid) - 1u); }
  static vu load_codes(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static vu load_codes_tail(const uint8_t* p, uint32_t valid) { return _mm512_maskz_loadu_epi32(first(valid), p); }
  static vf set1(float value) { return _mm512_set1_ps(value); }
  static vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
  static vf loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, vf value) { _mm512_storeu_ps(p, value); }
  static vf scales(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static vf scales_tail(const uint16_t* p, uint32_t valid) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first(valid), p));
  }
  // Sum of the 16 lanes. Not _mm512_reduce_add_ps: GCC 12 warns (maybe-uninitialized) inside it
  // under -Werror.
  static float hsum(vf v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));  // swap 256-bit halves
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));  // swap 128-bit lanes
    __m128 sum = _mm512_castps512_ps128(v);
    sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
    sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
    return _mm_cvtss_f32(sum);
  }
};

}  // namespace
}  // namespace metrale::cpu
