// SPDX-License-Identifier: MIT OR Apache-2.0
// What the AVX-512 panel Isas (simd_avx512.cpp, simd_avx512bf16.cpp, int8_avx512vnni.cpp)
// share: 16 lanes of codes, f32 totals, group scales and zero points, f32 or int32
// accumulators, and the byte extractions of 8-bit codes. Each Isa derives from them and adds its
// own operand types, decode, broadcast and dot step (see panel_kernels.hpp for the interface).
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
  static vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
  static vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
  static vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
  static vf fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
  static vf loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, vf value) { _mm512_storeu_ps(p, value); }
  static vf scales_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static vf scales_f16_tail(const uint16_t* p, uint32_t valid) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first(valid), p));
  }
  static vf scales_f32(const float* p) { return _mm512_loadu_ps(p); }
  static vf scales_f32_tail(const float* p, uint32_t valid) { return _mm512_maskz_loadu_ps(first(valid), p); }
  static vf zeros(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static vf zeros_tail(const uint8_t* p, uint32_t valid) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(first(valid), p)));
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

  // Byte B of every 32-bit lane, zero-extended (8-bit codes keep 4 k per lane in k order).
  template <uint32_t B>
  static __m512i byte_of(vu unit) {
    if constexpr (B == 3) return _mm512_srli_epi32(unit, 24);
    else if constexpr (B == 0) return _mm512_and_si512(unit, _mm512_set1_epi32(0xff));
    else return _mm512_and_si512(_mm512_srli_epi32(unit, 8 * B), _mm512_set1_epi32(0xff));
  }
  // E4M3 byte b -> the f16 of e4m3(b) / 256, exact, subnormals included: the f16 exponent field
  // (bias 15) takes E4M3's (bias 7) as it is, which scales every value, subnormal or not, by
  // 2^-8. `high` holds b in the high byte of each 16-bit word; the low byte is ignored.
  static __m512i fp8_f16_words(__m512i high) {
    return _mm512_and_si512(_mm512_srai_epi16(high, 1), _mm512_set1_epi16(static_cast<short>(0xbf80)));
  }
};

// f32 accumulators (the bf16-activation Isas).
struct Avx512FloatAcc {
  using va = __m512;
  static va zero_acc() { return _mm512_setzero_ps(); }
  static __m512 to_f32(va acc) { return acc; }
};

// int32 accumulators (the int8-activation Isas): exact sums, converted once per group.
struct Avx512IntAcc {
  using va = __m512i;
  static va zero_acc() { return _mm512_setzero_si512(); }
  static __m512 to_f32(va acc) { return _mm512_cvtepi32_ps(acc); }
  // Sum of `len` (a multiple of 32) int8 activations at p, exact: bytes biased by +128 (the
  // sign bit flipped) and summed as unsigned by vpsadbw, the bias taken off at the end.
  static float group_sum_i8(const int8_t* p, uint32_t len) {
    __m256i s = _mm256_setzero_si256();
    for (uint32_t t = 0; t < len; t += 32) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + t));
      s = _mm256_add_epi64(s, _mm256_sad_epu8(_mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))),
                                              _mm256_setzero_si256()));
    }
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    const int64_t total = _mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1);
    return static_cast<float>(total - 128 * static_cast<int64_t>(len));
  }
};

}  // namespace
}  // namespace metrale::cpu
