// SPDX-License-Identifier: MIT OR Apache-2.0
// W4A16 bodies for the cpu-x86_64-avx512 tier (AVX-512 F/BW/VL, with AVX2, FMA, F16C).
// Compiled with the matching -m flags; called only after target detection found them.
// GCC 12's AVX-512 intrinsics seed results with a self-initialised "undefined" vector, which
// -Wuninitialized reports wherever they are inlined (GCC bug 105593); silence it for the
// header's own lines only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include "w4a16_simd.hpp"

namespace metrale::cpu::avx512 {
namespace {

struct Isa {
  using vf = __m512;
  using vo = __m512;
  using Elem = float;
  static constexpr uint32_t kLanes = 16;
  static constexpr uint32_t kKPerVector = 16;
  static constexpr uint32_t kUnitK = 1;
  static constexpr bool kPreScaled = true;  // (q - 8) * scale is exact in f32
  static constexpr uint32_t kDotMR = 4, kDotNR = 4;
  static constexpr uint32_t kOuterMR = 8, kOuterNV = 2;

  static float half(uint16_t bits) { return _cvtsh_ss(bits); }
  static vf zero() { return _mm512_setzero_ps(); }
  static vf set1(float value) { return _mm512_set1_ps(value); }
  static vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
  static vf dot(vf acc, vo w, vo x) { return _mm512_fmadd_ps(w, x, acc); }
  static vo load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, vo value) { _mm512_storeu_ps(p, value); }
  static vf loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, vf value) { _mm512_storeu_ps(p, value); }
  static vo scale(vo w, vf s) { return _mm512_mul_ps(w, s); }
  // Not _mm512_reduce_add_ps: GCC 12 warns (maybe-uninitialized) inside it under -Werror.
  static float hsum(vf value) {
    value = _mm512_add_ps(value, _mm512_shuffle_f32x4(value, value, 0x4e));  // swap 256-bit halves
    value = _mm512_add_ps(value, _mm512_shuffle_f32x4(value, value, 0xb1));  // swap 128-bit lanes
    __m128 sum = _mm512_castps512_ps128(value);
    sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
    sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
    return _mm_cvtss_f32(sum);
  }

  // 16 bytes = 32 codes, spread to consecutive bytes in k order (see the AVX2 tier), then
  // (q - 8) sign-extended to i32 and converted.
  static void decode2(const uint8_t* p, vo& a, vo& b) {
    const __m256i words = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    __m256i nibbles = _mm256_or_si256(_mm256_and_si256(words, _mm256_set1_epi16(0x000f)),
                                      _mm256_and_si256(_mm256_slli_epi16(words, 4), _mm256_set1_epi16(0x0f00)));
    nibbles = _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8));
    a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(nibbles)));
    b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(nibbles, 1)));
  }

  static const float* prepare_x(const uint16_t* src, uint32_t count, float* dst) {
    for (uint32_t t = 0; t < count; t += 16) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + t));
      _mm512_storeu_ps(dst + t, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16)));
    }
    return dst;
  }

  static vo bcast_unit(const float* p) { return _mm512_set1_ps(*p); }

  static void decode_t(const uint32_t* base, const int32_t* idx, float* out, uint32_t stride) {
    const __m512i offsets = _mm512_loadu_si512(idx);
    const __m512i mask = _mm512_set1_epi32(0xf), eight = _mm512_set1_epi32(8);
    for (uint32_t w = 0; w < 8; ++w) {
      __m512i words = _mm512_i32gather_epi32(offsets, base + w, 4);
      for (uint32_t j = 0; j < 8; ++j) {
        const __m512i q = _mm512_sub_epi32(_mm512_and_si512(words, mask), eight);
        _mm512_storeu_ps(out + (w * 8 + j) * stride, _mm512_cvtepi32_ps(q));
        words = _mm512_srli_epi32(words, 4);
      }
    }
  }
};

}  // namespace

W4a16Bodies bodies() { return W4a16Simd<Isa>::bodies(); }

}  // namespace metrale::cpu::avx512
