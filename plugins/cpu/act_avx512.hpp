// SPDX-License-Identifier: MIT OR Apache-2.0
// act/silu_mul and act/gelu_mul on AVX-512F, 16 columns per step: the same semantics as the
// baseline bodies (f32 arithmetic, bf16 out rounded to nearest-even, NaN kept) with exp computed
// in vector registers instead of one libm call per element (a MoE prefill step applies the
// activation to every routed row: ~5% of its time went to scalar expf).
//
// exp(x) = 2^n * e^r with n = round(x / ln 2), r = x - n ln 2 (two-part ln 2, |r| <= ln2 / 2) and
// e^r by its degree-6 Taylor polynomial (relative error < 2e-7, about 1-2 ulp, far below the
// bf16 rounding of the output); vscalefps applies 2^n and saturates to inf or 0 for large |x|,
// so silu(-100) = -0 and tanh(+-big) = +-1 exactly as in libm.
//
// Internal linkage on purpose (see numeric.hpp): included by each AVX-512 tier's TU, compiled
// with its flags.
#pragma once

#include <immintrin.h>

#include "kernels.hpp"
#include "numeric.hpp"

namespace metrale::cpu {
namespace {

struct ActAvx512 {
  static __m512 exp(__m512 x) {
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln 2, high part: exact
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);      // ln 2, low part
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
  }

  // g / (1 + e^-g)
  static __m512 silu(__m512 g) {
    return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp(_mm512_sub_ps(_mm512_setzero_ps(), g))));
  }

  // 0.5 g (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g^3), tanh(u) = 1 - 2 / (e^2u + 1)
  static __m512 gelu_tanh(__m512 g) {
    const __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
    const __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f), _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), g3, g));
    const __m512 e = exp(_mm512_add_ps(u, u));
    const __m512 tanh_u = _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), g), _mm512_add_ps(_mm512_set1_ps(1.0f), tanh_u));
  }

  static __m512 load_bf16(const uint16_t* p, __mmask16 lanes) {
    const __m256i bits = _mm256_maskz_loadu_epi16(lanes, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }

  // f32_to_bf16 of numeric.hpp, 16 lanes: round to nearest even, NaN quieted.
  static void store_bf16(uint16_t* p, __m512 v, __mmask16 lanes) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    rounded = _mm512_mask_or_epi32(rounded, nan, _mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x0040));
    _mm256_mask_storeu_epi16(p, lanes, _mm512_cvtepi32_epi16(rounded));
  }

  // Block (bx, by): columns [1024 bx, 1024 bx + 1024) of row by, as the baseline's `gated`.
  template <__m512 (*Act)(__m512)>
  static void gated(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char*) {
    const ActBlock b = act_block(args, bx, by);
    for (uint32_t j = b.begin; j < b.end; j += 16) {
      const auto lanes = static_cast<__mmask16>(b.end - j >= 16 ? 0xffffu : (1u << (b.end - j)) - 1u);
      const __m512 value = _mm512_mul_ps(Act(load_bf16(b.gate + j, lanes)), load_bf16(b.up + j, lanes));
      store_bf16(b.out + j, value, lanes);
    }
  }

  static void set(SimdBodies& b) {
    b[Simd::silu_mul] = &gated<&silu>;
    b[Simd::gelu_mul] = &gated<&gelu_tanh>;
  }
};

}  // namespace
}  // namespace metrale::cpu
