// SPDX-License-Identifier: MIT OR Apache-2.0
// What the AVX2 tier's kernels (simd_avx2.cpp, act_avx2.hpp, quant_avx2.hpp, attn_avx2.hpp) all
// need of a ymm register: 8 bf16 as f32 (exact: a 16-bit shift) and the horizontal max and sum.
//
// Internal linkage on purpose (see numeric.hpp): included by the AVX2 tier's TU only.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace metrale::cpu {
namespace {

struct Avx2Lanes {
  static __m256 load_bf16(const uint16_t* p) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }
  // Elements [0, count) of p (count <= 8), the other lanes 0: nothing past p + count is read.
  static __m256 load_bf16(const uint16_t* p, uint32_t count) {
    if (count >= 8) return load_bf16(p);
    alignas(16) uint16_t pad[8] = {};
    __builtin_memcpy(pad, p, count * 2);
    return load_bf16(pad);
  }
  static float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  }
  static float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
};

}  // namespace
}  // namespace metrale::cpu
