// SPDX-License-Identifier: MIT OR Apache-2.0
// The per-row and per-128-column activation quantizers (quant/quantize_int8*, quantize_fp8*)
// on AVX2, 8 elements per step, bit for bit the baseline's QuantRule (quant_rule.hpp), as
// quant_avx512.hpp on AVX-512: the group maximum of |x| is exact and the scale is the rule's own
// (scalar); vdivps is the IEEE f32 division, the bf16 rounding and the E4M3 encoding are the
// integer forms of numeric.hpp, and vcvtps2dq (default MXCSR: nearest even) is std::nearbyint.
// The quotient is clamped before the bf16 rounding (the bounds are bf16 values), and a NaN
// quotient (vmaxps returns its second operand) becomes the lowest code. A group's last partial
// 8 elements go through a zero-padded copy.
//
// Internal linkage on purpose (see numeric.hpp): included by the AVX2 tier's TU.
#pragma once

#include <immintrin.h>

#include "avx2_lanes.hpp"
#include "kernels.hpp"
#include "quant_rule.hpp"

namespace metrale::cpu {
namespace {

struct QuantAvx2 : Avx2Lanes {
  // Finite f32 (here within +-448) to bf16 values, ties to even.
  static __m256 round_bf16(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i up = _mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    return _mm256_castsi256_ps(_mm256_and_si256(up, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  // E4M3 codes of values within +-448 (f32_to_e4m3 without its NaN and saturation cases).
  static __m256i e4m3(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));
    const __m256i abs_bits = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256 magnitude = _mm256_castsi256_ps(abs_bits);
    const __m256i sub = _mm256_cvtps_epi32(_mm256_mul_ps(magnitude, _mm256_set1_ps(512.0f)));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(abs_bits, 20), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(abs_bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7ffff)));
    const __m256i normal = _mm256_sub_epi32(_mm256_srli_epi32(rounded, 20), _mm256_set1_epi32(120 << 3));
    const __m256 small = _mm256_cmp_ps(magnitude, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ);
    return _mm256_or_si256(sign, _mm256_blendv_epi8(normal, sub, _mm256_castps_si256(small)));
  }
  // The low byte of each of 8 int32 lanes to p[0, count).
  static void store_bytes(uint8_t* p, __m256i code, uint32_t count) {
    const __m256i bytes = _mm256_shuffle_epi8(code, _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 4, 8, 12, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128)));
    const __m128i joined = _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
    if (count == 8) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(p), joined);
    } else {
      alignas(16) uint8_t out[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(out), joined);
      __builtin_memcpy(p, out, count);
    }
  }

  // Block (bx, 0): row bx in groups of kWidth columns (0: the whole row), one scale each.
  template <Codes kCodes, Arithmetic kArith, uint32_t kWidth>
  static void quantize(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
    using Rule = QuantRule<kCodes, kArith>;
    const uint32_t k = arg_u32(args, 4), width = kWidth ? kWidth : k;
    const uint16_t* x = arg_ptr<const uint16_t>(args, 0) + static_cast<size_t>(bx) * k;
    uint8_t* xq = arg_ptr<uint8_t>(args, 1) + static_cast<size_t>(bx) * k;
    float* xscale = arg_ptr<float>(args, 2) + static_cast<size_t>(bx) * (k / width);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (uint32_t g0 = 0; g0 < k; g0 += width) {
      __m256 peak = _mm256_setzero_ps();
      // max(|x|, peak) keeps peak when |x| is NaN, as the baseline's fmax does.
      for (uint32_t t = 0; t < width; t += 8)
        peak = _mm256_max_ps(_mm256_and_ps(load_bf16(x + g0 + t, min_u32(8, width - t)), abs_mask), peak);
      const float scale = Rule::scale(hmax(peak));
      xscale[g0 / width] = scale;
      const __m256 divisor = _mm256_set1_ps(scale);
      for (uint32_t t = 0; t < width; t += 8) {
        const uint32_t count = min_u32(8, width - t);
        __m256i code = _mm256_setzero_si256();  // scale 0: every code 0
        if (scale != 0.0f) {
          __m256 v = _mm256_div_ps(load_bf16(x + g0 + t, count), divisor);
          v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(Rule::kLow)), _mm256_set1_ps(Rule::kHigh));
          if constexpr (kArith == Arithmetic::bf16) v = round_bf16(v);
          code = Rule::kInt ? _mm256_cvtps_epi32(v) : e4m3(v);
        }
        store_bytes(xq + g0 + t, code, count);
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
