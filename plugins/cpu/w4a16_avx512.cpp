// SPDX-License-Identifier: MIT OR Apache-2.0
// W4A16 bodies for the cpu-x86_64-avx512 tier (AVX-512 F/BW/VL, with AVX2, FMA, F16C), on the
// 16-column panel layout (panel_layout.hpp) that this tier's w4a16_repack writes at load; the
// loop structure is w4a16_panel.hpp's. Compiled with the matching -m flags; called only after
// target detection found them.
//
// A panel is one zmm of 16 columns. Decoding a unit takes one shift and one ternary-logic op per
// k: the code moved to mantissa bits 19..22 under the exponent of 16 is exactly the f32 value
// 16 + q, the operand of an FMA against the broadcast f32 activation.
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

#include "act_avx512.hpp"
#include "avx512_panel_ops.hpp"
#include "w4a16_panel.hpp"

namespace metrale::cpu::avx512 {
namespace {

struct Isa : Avx512PanelOps {
  using vw = __m512;
  using vx = __m512;
  using Act = float;
  static constexpr uint32_t kSteps = 8;
  // Accumulators MR x panels <= 24 zmm, leaving room for the decoded vectors and constants;
  // 16 rows of one panel for tall blocks (one decode per 16 FMAs). Measured on Zen 4.
  static constexpr uint32_t kMaxRows = 16;
  static constexpr uint32_t panels(uint32_t mr) { return mr <= 4 ? 4 : mr <= 8 ? 3 : 1; }

  // k = 2r at bits 4r, k = 2r + 1 at bits 16 + 4r; moved to bits 19..22, masked, under 16.0f.
  template <uint32_t S>
  static vw decode(vu unit) {
    constexpr int kShift = S % 2 == 0 ? 19 - 4 * static_cast<int>(S / 2) : 3 - 4 * static_cast<int>(S / 2);
    const __m512i shifted = kShift >= 0 ? _mm512_slli_epi32(unit, kShift) : _mm512_srli_epi32(unit, -kShift);
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(shifted, _mm512_set1_epi32(0x00780000),
                                                         _mm512_set1_epi32(0x41800000), 0xea));  // (a & b) | c
  }
  static vx bcast(const float* p) { return _mm512_set1_ps(*p); }
  static vf dot(vf acc, vw w, vx x) { return _mm512_fmadd_ps(w, x, acc); }

  // bf16 -> f32 is a 16-bit shift.
  static const float* prepare(const uint16_t* src, uint32_t len, float* dst) {
    for (uint32_t t = 0; t < len; t += 16) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + t));
      _mm512_storeu_ps(dst + t, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16)));
    }
    return dst;
  }
  static float correction(const float* p) {
    __m512 s[4];
#pragma GCC unroll 4
    for (uint32_t t = 0; t < 4; ++t) s[t] = _mm512_add_ps(_mm512_loadu_ps(p + 16 * t), _mm512_loadu_ps(p + 64 + 16 * t));
    return -24.0f * hsum(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])));
  }
};
static_assert(kGroup == 128);

}  // namespace

SimdBodies bodies() {
  SimdBodies b = PanelKernels<Isa>::bodies();
  ActAvx512::set(b);
  return b;
}

}  // namespace metrale::cpu::avx512
