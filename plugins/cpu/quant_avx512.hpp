// SPDX-License-Identifier: MIT OR Apache-2.0
// quant/quantize_int8 on AVX-512F/BW, 16 elements per step, bit for bit the baseline's result:
// the row maximum of |x| is exact, and vdivps and vcvtps2dq (under the default MXCSR: round to
// nearest even, no flush to zero) are the IEEE f32 division and rounding the contract names.
// A NaN quotient (a row holding NaN or infinities) becomes -127, as the baseline's clamp makes it.
//
// Internal linkage on purpose (see numeric.hpp): included by each AVX-512 tier's TU.
#pragma once

#include <immintrin.h>

#include "kernels.hpp"

namespace metrale::cpu {
namespace {

struct QuantAvx512 {
  static __mmask16 lanes(uint32_t left) { return static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u); }
  static __m512 load_bf16(const uint16_t* p, __mmask16 mask) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
  }

  // Block (bx, 0): row bx.
  static void quantize_int8(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
    const uint32_t k = arg_u32(args, 4);
    const uint16_t* x = arg_ptr<const uint16_t>(args, 0) + static_cast<size_t>(bx) * k;
    int8_t* xq = arg_ptr<int8_t>(args, 1) + static_cast<size_t>(bx) * k;
    __m512 peak = _mm512_setzero_ps();
    // max(|x|, peak) keeps peak when |x| is NaN, as the baseline's fmax does.
    for (uint32_t t = 0; t < k; t += 16) peak = _mm512_max_ps(_mm512_abs_ps(load_bf16(x + t, lanes(k - t))), peak);
    __m256 half = _mm256_max_ps(_mm512_castps512_ps256(peak),
                                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(peak), 1)));
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    const float scale = _mm_cvtss_f32(q) / 127.0f;
    arg_ptr<float>(args, 2)[bx] = scale;
    const __m512 divisor = _mm512_set1_ps(scale);
    for (uint32_t t = 0; t < k; t += 16) {
      const __mmask16 mask = lanes(k - t);
      __m512i code = _mm512_setzero_si512();  // sr = 0: every code 0
      if (scale != 0.0f) {
        code = _mm512_cvtps_epi32(_mm512_div_ps(load_bf16(x + t, mask), divisor));
        code = _mm512_min_epi32(_mm512_max_epi32(code, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
      }
      _mm512_mask_cvtepi32_storeu_epi8(xq + t, mask, code);
    }
  }

  static void set(SimdBodies& b) { b[Simd::quantize_int8] = &quantize_int8; }
};

}  // namespace
}  // namespace metrale::cpu
