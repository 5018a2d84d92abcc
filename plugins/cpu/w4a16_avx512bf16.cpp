// SPDX-License-Identifier: MIT OR Apache-2.0
// W4A16 bodies for the cpu-x86_64-avx512bf16 tier, on the 16-column panel layout
// (panel_layout.hpp) that this tier's w4a16_repack writes at load; the loop structure is
// w4a16_panel.hpp's. Compiled with the matching -m flags; called only after target detection.
//
// Decoding a 64-byte unit (16 columns x 8 k) takes one shift and one ternary-logic op per pair
// step r: 16 lanes of bf16 pairs (16 + q[2r], 16 + q[2r + 1]), exact, the operand of `vdpbf16ps`
// against a broadcast activation pair; a step is 32 multiply-adds per instruction, twice an
// f32 FMA's.
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

#include "act_avx512.hpp"
#include "avx512_panel_ops.hpp"
#include "w4a16_panel.hpp"

namespace metrale::cpu::avx512bf16 {
namespace {

struct Isa : Avx512PanelOps {
  using vw = __m512bh;
  using vx = __m512bh;
  using Act = uint16_t;  // bf16 bits, used as they are
  static constexpr uint32_t kSteps = 4;  // (k, k + 1) pairs
  // Accumulators MR x panels <= 16 zmm, leaving room for decoded vectors and broadcasts. One
  // row takes a whole 128-column tile (8 panel streams) at once: a MoE expert's streams are
  // short (6 KiB per panel in a down projection), and more of them in flight keep memory busy.
  static constexpr uint32_t kMaxRows = 8;
  static constexpr uint32_t panels(uint32_t mr) { return mr <= 1 ? 8 : mr <= 4 ? 4 : 2; }

  // Per 16-bit word, nibble r moved to mantissa bits 3..6 under the exponent of 16: 16 + q.
  template <uint32_t R>
  static vw decode(vu unit) {
    const __m512i shifted = R == 0 ? _mm512_slli_epi16(unit, 3) : _mm512_srli_epi16(unit, 4 * R - 3);
    return reinterpret_cast<__m512bh>(_mm512_ternarylogic_epi32(shifted, _mm512_set1_epi16(0x0078),
                                                                _mm512_set1_epi16(0x4180), 0xea));  // (a & b) | c
  }
  static vx bcast(const uint16_t* p) {
    int32_t pair;
    __builtin_memcpy(&pair, p, sizeof pair);
    return reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
  }
  static vf dot(vf acc, vw w, vx x) { return _mm512_dpbf16_ps(acc, w, x); }
  static const uint16_t* prepare(const uint16_t* src, uint32_t, uint16_t*) { return src; }
  // -24 * sum over the group, f32 from bf16 pairs.
  static float correction(const uint16_t* p) {
    const __m512bh minus24 = reinterpret_cast<__m512bh>(_mm512_set1_epi16(static_cast<short>(0xc1c0)));
    __m512 c = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (uint32_t t = 0; t < kGroup; t += 32)
      c = _mm512_dpbf16_ps(c, reinterpret_cast<__m512bh>(_mm512_loadu_si512(p + t)), minus24);
    return hsum(c);
  }
};

}  // namespace

SimdBodies bodies() {
  SimdBodies b = PanelKernels<Isa>::bodies();
  ActAvx512::set(b);
  return b;
}

}  // namespace metrale::cpu::avx512bf16
