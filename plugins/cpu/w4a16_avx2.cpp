// SPDX-License-Identifier: MIT OR Apache-2.0
// W4A16 bodies for the cpu-x86_64-avx2 tier (AVX2 + FMA + F16C). Compiled with
// -mavx2 -mfma -mf16c; called only after target detection found those features.
#include <immintrin.h>

#include "w4a16_simd.hpp"

namespace metrale::cpu::avx2 {
namespace {

struct Isa {
  using vf = __m256;
  using vo = __m256;
  using Elem = float;
  static constexpr uint32_t kLanes = 8;
  static constexpr uint32_t kKPerVector = 8;
  static constexpr uint32_t kUnitK = 1;
  static constexpr bool kPreScaled = true;  // (q - 8) * scale is exact in f32
  static constexpr uint32_t kDotMR = 2, kDotNR = 4;
  static constexpr uint32_t kOuterMR = 4, kOuterNV = 2;

  static float half(uint16_t bits) { return _cvtsh_ss(bits); }
  static vf zero() { return _mm256_setzero_ps(); }
  static vf set1(float value) { return _mm256_set1_ps(value); }
  static vf fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
  static vf dot(vf acc, vo w, vo x) { return _mm256_fmadd_ps(w, x, acc); }
  static vo load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, vo value) { _mm256_storeu_ps(p, value); }
  static vf loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, vf value) { _mm256_storeu_ps(p, value); }
  static vo scale(vo w, vf s) { return _mm256_mul_ps(w, s); }
  static float hsum(vf value) {
    __m128 sum = _mm_add_ps(_mm256_castps256_ps128(value), _mm256_extractf128_ps(value, 1));
    sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
    sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
    return _mm_cvtss_f32(sum);
  }

  // 8 bytes = 16 codes. Each byte b becomes the 16-bit word (b & 0xf) | (b >> 4) << 8, i.e. the
  // two codes as consecutive bytes in k order; then sign-extend (q - 8) to i32 and convert.
  static void decode2(const uint8_t* p, vo& a, vo& b) {
    const __m128i words = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    __m128i nibbles = _mm_or_si128(_mm_and_si128(words, _mm_set1_epi16(0x000f)),
                                   _mm_and_si128(_mm_slli_epi16(words, 4), _mm_set1_epi16(0x0f00)));
    nibbles = _mm_sub_epi8(nibbles, _mm_set1_epi8(8));
    a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(nibbles));
    b = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(nibbles, 8)));
  }

  static const float* prepare_x(const uint16_t* src, uint32_t count, float* dst) {
    for (uint32_t t = 0; t < count; t += 8) {
      const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + t));
      _mm256_storeu_ps(dst + t, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16)));
    }
    return dst;
  }

  static vo bcast_unit(const float* p) { return _mm256_broadcast_ss(p); }

  static void decode_t(const uint32_t* base, const int32_t* idx, float* out, uint32_t stride) {
    const __m256i offsets = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx));
    const __m256i mask = _mm256_set1_epi32(0xf), eight = _mm256_set1_epi32(8);
    for (uint32_t w = 0; w < 8; ++w) {
      __m256i words = _mm256_i32gather_epi32(reinterpret_cast<const int*>(base + w), offsets, 4);
      for (uint32_t j = 0; j < 8; ++j) {
        const __m256i q = _mm256_sub_epi32(_mm256_and_si256(words, mask), eight);
        _mm256_storeu_ps(out + (w * 8 + j) * stride, _mm256_cvtepi32_ps(q));
        words = _mm256_srli_epi32(words, 4);
      }
    }
  }
};

}  // namespace

W4a16Bodies bodies() { return W4a16Simd<Isa>::bodies(); }

}  // namespace metrale::cpu::avx2
