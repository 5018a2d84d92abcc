// SPDX-License-Identifier: MIT OR Apache-2.0
// rope/qk_norm_rope on AVX-512F, 16 elements per step, bit for bit the baseline body: the sum of
// squares in the baseline's 16 partial sums (lane l holds elements l, l + 16, ...; then the same
// halving tree), every product and bf16 rounding of rms_norm and rope in the same order (each
// product rounded before any sum, so nothing fuses into an FMA), cos and sin from the same libm
// calls (rotary.hpp). Internal linkage on purpose (see numeric.hpp): included by each AVX-512
// tier's TU, compiled with its flags.
#pragma once

#include <immintrin.h>

#include "act_avx512.hpp"
#include "kernels.hpp"
#include "numeric.hpp"
#include "rotary.hpp"

#include <cmath>

namespace metrale::cpu {
namespace {

struct DecoderAvx512 {
  static constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

  static __mmask16 lanes(uint32_t left) {
    return static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u);
  }

  // f32 -> bf16 -> f32 of numeric.hpp, 16 lanes: round to nearest even, NaN quieted.
  static __m512 round_bf16(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    rounded = _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x00400000));
    return _mm512_castsi512_ps(_mm512_and_si512(rounded, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }

  // The baseline's inverse_rms: the lanes are its 16 partial sums (explicitly rounded products
  // and sums: never an FMA), the tail masked to zeros.
  static float inverse_rms(const uint16_t* row, uint32_t h, float eps) {
    __m512 sums = _mm512_setzero_ps();
    for (uint32_t j = 0; j < h; j += 16) {
      const __m512 v = ActAvx512::load_bf16(row + j, lanes(h - j));
      sums = _mm512_add_round_ps(sums, _mm512_mul_round_ps(v, v, kNearest), kNearest);
    }
    alignas(64) float part[16];
    _mm512_store_ps(part, sums);
    for (uint32_t width = 8; width > 0; width /= 2)
      for (uint32_t l = 0; l < width; ++l) part[l] += part[l + width];
    return 1.0f / std::sqrt(part[0] / static_cast<float>(h) + eps);
  }

  // bf16(weight · bf16(x · scale)): the value rms_norm stores.
  static __m512 normalised(const uint16_t* x, const uint16_t* weight, __m512 scale, __mmask16 m) {
    return round_bf16(_mm512_mul_ps(ActAvx512::load_bf16(weight, m), round_bf16(_mm512_mul_ps(ActAvx512::load_bf16(x, m), scale))));
  }

  static __m512 negated(__m512 v) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
  }

  // The baseline's normalise_rotate, 16 pairs per step.
  static void normalise_rotate(uint16_t* head, const uint16_t* weight, const float* cosines, const float* sines,
                               uint32_t half, float eps) {
    const __m512 scale = _mm512_set1_ps(inverse_rms(head, 2 * half, eps));
    for (uint32_t i = 0; i < half; i += 16) {
      const __mmask16 m = lanes(half - i);
      const __m512 a = normalised(head + i, weight + i, scale, m);
      const __m512 b = normalised(head + i + half, weight + i + half, scale, m);
      const __m512 c = _mm512_maskz_loadu_ps(m, cosines + i), s = _mm512_maskz_loadu_ps(m, sines + i);
      ActAvx512::store_bf16(head + i, _mm512_add_ps(round_bf16(_mm512_mul_ps(a, c)), round_bf16(_mm512_mul_ps(negated(b), s))), m);
      ActAvx512::store_bf16(head + i + half, _mm512_add_ps(round_bf16(_mm512_mul_ps(b, c)), round_bf16(_mm512_mul_ps(a, s))), m);
    }
  }

  static void qk_norm_rope(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char* scratch) {
    qk_norm_rope_token(args, bx, scratch, normalise_rotate);
  }

  static void set(SimdBodies& b) { b[Simd::qk_norm_rope] = &qk_norm_rope; }
};

}  // namespace
}  // namespace metrale::cpu
