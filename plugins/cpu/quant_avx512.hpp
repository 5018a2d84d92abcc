// SPDX-License-Identifier: MIT OR Apache-2.0
// The per-row and per-128-column activation quantizers (quant/quantize_int8*, quantize_fp8*)
// on AVX-512F/BW, 16 elements per step, bit for bit the baseline's QuantRule (quant_rule.hpp):
// the group maximum of |x| is exact and the scale is the rule's own (scalar); vdivps is the IEEE
// f32 division, the bf16 rounding and the E4M3 encoding are the integer forms of numeric.hpp, and
// vcvtps2dq (default MXCSR: nearest even, no flush to zero) is std::nearbyint. The quotient is
// clamped before the bf16 rounding: the bounds are bf16 values, so the order does not change a
// code, and a NaN quotient (vmaxps returns its second operand) becomes the lowest code.
//
// Internal linkage on purpose (see numeric.hpp): included by each AVX-512 tier's TU.
#pragma once

#include <immintrin.h>

#include "kernels.hpp"
#include "quant_rule.hpp"

namespace metrale::cpu {
namespace {

struct QuantAvx512 {
  static __mmask16 lanes(uint32_t left) { return static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u); }
  static __m512 load_bf16(const uint16_t* p, __mmask16 mask) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
  }
  static float hmax(__m512 v) {
    __m256 half = _mm256_max_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_max_ss(q, _mm_movehdup_ps(q)));
  }
  // Finite f32 (here within +-448) to bf16 values, ties to even.
  static __m512 round_bf16(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i up = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    return _mm512_castsi512_ps(_mm512_and_si512(up, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  // E4M3 codes of values within +-448 (f32_to_e4m3 without its NaN and saturation cases).
  static __m512i e4m3(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 24), _mm512_set1_epi32(0x80));
    const __m512i abs_bits = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    const __m512 magnitude = _mm512_castsi512_ps(abs_bits);
    const __m512i sub = _mm512_cvtps_epi32(_mm512_mul_ps(magnitude, _mm512_set1_ps(512.0f)));
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(abs_bits, 20), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(abs_bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7ffff)));
    const __m512i normal = _mm512_sub_epi32(_mm512_srli_epi32(rounded, 20), _mm512_set1_epi32(120 << 3));
    const __mmask16 small = _mm512_cmp_ps_mask(magnitude, _mm512_set1_ps(0x1p-6f), _CMP_LT_OQ);
    return _mm512_or_si512(sign, _mm512_mask_blend_epi32(small, normal, sub));
  }

  // Block (bx, 0): row bx in groups of kWidth columns (0: the whole row), one scale each.
  template <Codes kCodes, Arithmetic kArith, uint32_t kWidth>
  static void quantize(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
    using Rule = QuantRule<kCodes, kArith>;
    const uint32_t k = arg_u32(args, 4), width = kWidth ? kWidth : k;
    const uint16_t* x = arg_ptr<const uint16_t>(args, 0) + static_cast<size_t>(bx) * k;
    uint8_t* xq = arg_ptr<uint8_t>(args, 1) + static_cast<size_t>(bx) * k;
    float* xscale = arg_ptr<float>(args, 2) + static_cast<size_t>(bx) * (k / width);
    for (uint32_t g0 = 0; g0 < k; g0 += width) {
      __m512 peak = _mm512_setzero_ps();
      // max(|x|, peak) keeps peak when |x| is NaN, as the baseline's fmax does.
      for (uint32_t t = 0; t < width; t += 16)
        peak = _mm512_max_ps(_mm512_abs_ps(load_bf16(x + g0 + t, lanes(width - t))), peak);
      const float scale = Rule::scale(hmax(peak));
      xscale[g0 / width] = scale;
      const __m512 divisor = _mm512_set1_ps(scale);
      for (uint32_t t = 0; t < width; t += 16) {
        const __mmask16 mask = lanes(width - t);
        __m512i code = _mm512_setzero_si512();  // scale 0: every code 0
        if (scale != 0.0f) {
          __m512 v = _mm512_div_ps(load_bf16(x + g0 + t, mask), divisor);
          v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(Rule::kLow)), _mm512_set1_ps(Rule::kHigh));
          if constexpr (kArith == Arithmetic::bf16) v = round_bf16(v);
          code = Rule::kInt ? _mm512_cvtps_epi32(v) : e4m3(v);
        }
        _mm512_mask_cvtepi32_storeu_epi8(xq + g0 + t, mask, code);
      }
    }
  }

  static void set(SimdBodies& b) {
    b[Simd::quantize_int8] = &quantize<Codes::w8, Arithmetic::f32, 0>;
    b[Simd::quantize_int8_bf16] = &quantize<Codes::w8, Arithmetic::bf16, 0>;
    b[Simd::quantize_fp8] = &quantize<Codes::fp8, Arithmetic::f32, 0>;
    b[Simd::quantize_fp8_bf16] = &quantize<Codes::fp8, Arithmetic::bf16, 0>;
    b[Simd::quantize_fp8_group128] = &quantize<Codes::fp8, Arithmetic::f32, 128>;
    b[Simd::quantize_fp8_group128_bf16] = &quantize<Codes::fp8, Arithmetic::bf16, 128>;
  }
};

}  // namespace
}  // namespace metrale::cpu
