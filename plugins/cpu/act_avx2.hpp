// SPDX-License-Identifier: MIT OR Apache-2.0
// act/silu_mul and act/gelu_mul on AVX2 + FMA, 8 columns per step: the semantics of the baseline
// bodies (f32 arithmetic, bf16 out rounded to nearest-even, NaN kept) with exp in vector
// registers instead of one libm call per element (a MoE decode step on Zen 3 spent 4% of its
// time in scalar expf).
//
// exp as act_avx512.hpp computes it (n = round(x / ln 2), two-part ln 2, degree-6 polynomial),
// without vscalefps: x is clamped to [-87, 88.72] so that 2^n, applied as two powers of two of
// at most 64 each, stays normal, and x above the clamp gives inf as libm does. Below -87 the
// result stays near 2^-126 where libm's is smaller still: every caller adds it to 1.
//
// Internal linkage on purpose (see numeric.hpp): included by the AVX2 tier's TU.
#pragma once

#include <immintrin.h>

#include "avx2_lanes.hpp"
#include "kernels.hpp"
#include "numeric.hpp"

namespace metrale::cpu {
namespace {

struct ActAvx2 : Avx2Lanes {
  static __m256 pow2(__m256i n) {  // 2^n for |n| <= 127 as an f32 built from its exponent
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
  }
  // e^x = 2^n * e^r: n = round(x / ln 2) (returned), r = x - n ln 2 with a two-part ln 2, e^r by
  // its degree-6 Taylor polynomial (returned); attn_avx2.hpp's exp0 shares it.
  static __m256 exp_reduced(__m256 x, __m256& n) {
    n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln 2, high part: exact
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);      // ln 2, low part
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    return _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  }
  static __m256 exp(__m256 x) {
    // max/min return their second operand when one is NaN: x stays NaN.
    const __m256 xc = _mm256_min_ps(_mm256_set1_ps(88.72f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
    __m256 n;
    const __m256 p = exp_reduced(xc, n);
    const __m256i ni = _mm256_cvtps_epi32(n);  // -126 .. 128
    const __m256i half = _mm256_srai_epi32(ni, 1);
    const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, pow2(half)), pow2(_mm256_sub_epi32(ni, half)));
    return _mm256_blendv_ps(e, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, _mm256_set1_ps(88.72283935546875f), _CMP_GT_OQ));
  }

  // g / (1 + e^-g)
  static __m256 silu(__m256 g) {
    return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp(_mm256_sub_ps(_mm256_setzero_ps(), g))));
  }

  // 0.5 g (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g^3), tanh(u) = 1 - 2 / (e^2u + 1)
  static __m256 gelu_tanh(__m256 g) {
    const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
    const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g3, g));
    const __m256 e = exp(_mm256_add_ps(u, u));
    const __m256 tanh_u = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), g), _mm256_add_ps(_mm256_set1_ps(1.0f), tanh_u));
  }

  // f32_to_bf16 of numeric.hpp, 8 lanes: round to nearest even, NaN quieted.
  static void store_bf16(uint16_t* p, __m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    // |bits| > inf as signed compares: both sides below 2^31.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x0040));
    const __m256i out = _mm256_blendv_epi8(rounded, quiet, nan);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(out), _mm256_extracti128_si256(out, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  }

  // Block (bx, by): columns [1024 bx, 1024 bx + 1024) of row by, as the baseline's `gated`; the
  // last partial 8 through a zero-padded copy.
  template <__m256 (*Act)(__m256)>
  static void gated(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char*) {
    const ActBlock b = act_block(args, bx, by);
    uint32_t j = b.begin;
    for (; j + 8 <= b.end; j += 8) store_bf16(b.out + j, _mm256_mul_ps(Act(load_bf16(b.gate + j)), load_bf16(b.up + j)));
    if (j == b.end) return;
    uint16_t out[8];
    store_bf16(out, _mm256_mul_ps(Act(load_bf16(b.gate + j, b.end - j)), load_bf16(b.up + j, b.end - j)));
    __builtin_memcpy(b.out + j, out, (b.end - j) * 2);
  }

  static void set(SimdBodies& b) {
    b[Simd::silu_mul] = &gated<&silu>;
    b[Simd::gelu_mul] = &gated<&gelu_tanh>;
  }
};

}  // namespace
}  // namespace metrale::cpu
