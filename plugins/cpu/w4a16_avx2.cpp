// SPDX-License-Identifier: MIT OR Apache-2.0
// W4A16 bodies for the cpu-x86_64-avx2 tier (AVX2 + FMA + F16C), on the 16-column panel layout
// (panel_layout.hpp) that this tier's w4a16_repack writes at load; the loop structure is
// w4a16_panel.hpp's. Compiled with -mavx2 -mfma -mf16c; called only after target detection
// found those features.
//
// A panel is two ymm halves of 8 columns. Decoding a half unit takes a shift, an and and an or
// per k: the code moved to mantissa bits 19..22 under the exponent of 16 is exactly the f32
// value 16 + q, the operand of an FMA against the broadcast f32 activation.
#include <immintrin.h>

#include "w4a16_panel.hpp"

namespace metrale::cpu::avx2 {
namespace {

struct Isa {
  using vf = __m256;
  using vu = __m256i;
  using vw = __m256;
  using vx = __m256;
  using Act = float;
  static constexpr uint32_t kLanes = 8;
  static constexpr uint32_t kSteps = 8;
  // Accumulators MR x 2 x panels <= 12 ymm, leaving room for a decoded vector, a broadcast and
  // the two constants (16 ymm in all). More panels for one row (8 accumulators) spill.
  static constexpr uint32_t kMaxRows = 6;
  static constexpr uint32_t panels(uint32_t mr) { return mr <= 2 ? 2 : 1; }

  static vu load_codes(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static vu load_codes_tail(const uint8_t* p, uint32_t valid) {
    const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_epi32(reinterpret_cast<const int*>(p), lanes);
  }
  // k = 2r at bits 4r, k = 2r + 1 at bits 16 + 4r; moved to bits 19..22, masked, under 16.0f.
  template <uint32_t S>
  static vw decode(vu unit) {
    constexpr int kShift = S % 2 == 0 ? 19 - 4 * static_cast<int>(S / 2) : 3 - 4 * static_cast<int>(S / 2);
    const __m256i shifted = kShift >= 0 ? _mm256_slli_epi32(unit, kShift) : _mm256_srli_epi32(unit, -kShift);
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(shifted, _mm256_set1_epi32(0x00780000)),
                                               _mm256_set1_epi32(0x41800000)));
  }
  static vx bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static vf dot(vf acc, vw w, vx x) { return _mm256_fmadd_ps(w, x, acc); }
  static vf set1(float value) { return _mm256_set1_ps(value); }
  static vf fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
  static vf loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, vf value) { _mm256_storeu_ps(p, value); }
  static vf scales(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static vf scales_tail(const uint16_t* p, uint32_t valid) {
    alignas(16) uint16_t buf[8] = {};
    for (uint32_t c = 0; c < valid; ++c) buf[c] = p[c];
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
  }

  // bf16 -> f32 is a 16-bit shift.
  static const float* prepare(const uint16_t* src, uint32_t len, float* dst) {
    for (uint32_t t = 0; t < len; t += 8) {
      const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + t));
      _mm256_storeu_ps(dst + t, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16)));
    }
    return dst;
  }
  static float correction(const float* p) {
    __m256 s[4];
#pragma GCC unroll 4
    for (uint32_t t = 0; t < 4; ++t) {
      s[t] = _mm256_add_ps(_mm256_loadu_ps(p + 8 * t), _mm256_loadu_ps(p + 32 + 8 * t));
      s[t] = _mm256_add_ps(s[t], _mm256_add_ps(_mm256_loadu_ps(p + 64 + 8 * t), _mm256_loadu_ps(p + 96 + 8 * t)));
    }
    const __m256 c = _mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3]));
    __m128 sum = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
    sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
    sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
    return -24.0f * _mm_cvtss_f32(sum);
  }
};
static_assert(kGroup == 128);

}  // namespace

SimdBodies bodies() { return PanelKernels<Isa>::bodies(); }

}  // namespace metrale::cpu::avx2
