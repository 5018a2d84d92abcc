// SPDX-License-Identifier: MIT OR Apache-2.0
// W4A16 bodies for the cpu-x86_64-avx512bf16 tier: dot products on `vdpbf16ps`. Codes minus 8
// are small integers, exact in bf16, and the activations are bf16 already, so each group's dot
// runs on bf16 pairs with f32 accumulation and the group scale is applied after, in f32.
// Note: vdpbf16ps treats subnormal bf16 inputs as zero (DAZ); activations below 2^-126 in
// magnitude contribute nothing on this tier.
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

namespace metrale::cpu::avx512bf16 {
namespace {

// bf16 bits of q - 8 for q = 0..15 (the upper 16 entries are never indexed).
alignas(64) constexpr uint16_t kCodeBf16[32] = {
    0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040, 0xc000, 0xbf80,
    0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
    0,      0,      0,      0,      0,      0,      0,      0,
    0,      0,      0,      0,      0,      0,      0,      0};

struct Isa {
  using vf = __m512;
  using vo = __m512bh;
  using Elem = uint16_t;  // bf16 bits
  static constexpr uint32_t kLanes = 16;
  static constexpr uint32_t kKPerVector = 32;
  static constexpr uint32_t kUnitK = 2;  // a lane holds a (k, k + 1) pair
  static constexpr bool kPreScaled = false;
  static constexpr uint32_t kDotMR = 4, kDotNR = 2;
  static constexpr uint32_t kOuterMR = 8, kOuterNV = 2;

  static __m512i table() { return _mm512_load_si512(kCodeBf16); }

  static float half(uint16_t bits) { return _cvtsh_ss(bits); }
  static vf zero() { return _mm512_setzero_ps(); }
  static vf set1(float value) { return _mm512_set1_ps(value); }
  static vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
  static vf dot(vf acc, vo w, vo x) { return _mm512_dpbf16_ps(acc, w, x); }
  static vo load(const uint16_t* p) { return reinterpret_cast<vo>(_mm512_loadu_si512(p)); }
  static void store(uint16_t* p, vo value) { _mm512_storeu_si512(p, reinterpret_cast<__m512i>(value)); }
  static vf loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, vf value) { _mm512_storeu_ps(p, value); }
  static vo scale(vo w, vf) { return w; }  // never called: kPreScaled is false
  // Not _mm512_reduce_add_ps: GCC 12 warns (maybe-uninitialized) inside it under -Werror.
  static float hsum(vf value) {
    value = _mm512_add_ps(value, _mm512_shuffle_f32x4(value, value, 0x4e));  // swap 256-bit halves
    value = _mm512_add_ps(value, _mm512_shuffle_f32x4(value, value, 0xb1));  // swap 128-bit lanes
    __m128 sum = _mm512_castps512_ps128(value);
    sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
    sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
    return _mm_cvtss_f32(sum);
  }

  // 32 bytes = 64 codes: spread to consecutive bytes in k order, widen to 16-bit indices and
  // look the bf16 value of q - 8 up with one permute.
  static void decode2(const uint8_t* p, vo& a, vo& b) {
    const __m512i words = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512i nibbles = _mm512_or_si512(_mm512_and_si512(words, _mm512_set1_epi16(0x000f)),
                                            _mm512_and_si512(_mm512_slli_epi16(words, 4), _mm512_set1_epi16(0x0f00)));
    const __m512i lut = table();
    a = reinterpret_cast<vo>(_mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(nibbles)), lut));
    b = reinterpret_cast<vo>(_mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(nibbles, 1)), lut));
  }

  // bf16 activations are used as they are.
  static const uint16_t* prepare_x(const uint16_t* src, uint32_t, uint16_t*) { return src; }

  static vo bcast_unit(const uint16_t* p) {
    uint32_t pair;
    __builtin_memcpy(&pair, p, sizeof pair);
    return reinterpret_cast<vo>(_mm512_set1_epi32(static_cast<int>(pair)));
  }

  // Unit u of a row is the code pair (2u, 2u + 1): byte u of the half group's 32 bytes.
  static void decode_t(const uint32_t* base, const int32_t* idx, uint16_t* out, uint32_t stride) {
    const __m512i offsets = _mm512_loadu_si512(idx);
    const __m512i lut = table();
    const __m512i low = _mm512_set1_epi32(0x0f), high = _mm512_set1_epi32(0xf0);
    for (uint32_t w = 0; w < 8; ++w) {
      __m512i words = _mm512_i32gather_epi32(offsets, base + w, 4);
      for (uint32_t j = 0; j < 4; ++j) {
        const __m512i pair = _mm512_or_si512(_mm512_and_si512(words, low),
                                             _mm512_slli_epi32(_mm512_and_si512(words, high), 12));
        _mm512_storeu_si512(out + (w * 4 + j) * stride, _mm512_permutexvar_epi16(pair, lut));
        words = _mm512_srli_epi32(words, 8);
      }
    }
  }
};

}  // namespace

W4a16Bodies bodies() { return W4a16Simd<Isa>::bodies(); }

}  // namespace metrale::cpu::avx512bf16
