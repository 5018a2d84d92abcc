// SPDX-License-Identifier: MIT OR Apache-2.0
// Bodies of the cpu-x86_64-avx512bf16 tier: the bf16-activation GEMM families on the panel
// layouts (panel_layout.hpp) that this tier's repacks write at load, the loop structure
// panel_kernels.hpp's; the activations of act_avx512.hpp; the int8 quantization of
// quant_avx512.hpp. The int8-activation families come from int8_avx512vnni.cpp (or, on a CPU
// without VNNI, from the avx512 tier). Compiled with the matching -m flags; called only after
// target detection.
//
// Every decoder yields bf16 pairs (w[c][k], w[c][k + 1]) in lane c, exact, the operand of
// `vdpbf16ps` against a broadcast activation pair (32 multiply-adds per instruction, twice an
// f32 FMA's):
// - 4-bit codes: one shift and one ternary-logic op per pair step r: 16 + q[2r], 16 + q[2r + 1];
// - 8-bit integers: the two bytes as f32 (exact), whose high halves are their bf16;
// - E4M3: the two bytes as f16 of e4m3 / 256 (exact, subnormals included), to f32, to bf16.
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
#include "panel_kernels.hpp"
#include "quant_avx512.hpp"

namespace metrale::cpu::avx512bf16 {
namespace {

struct Isa : Avx512PanelOps, Avx512FloatAcc {
  using vw = __m512bh;
  using vx = __m512bh;
  using Act = uint16_t;  // bf16 bits, used as they are
  using Src = uint16_t;
  // Accumulators MR x panels <= 16 zmm, leaving room for decoded vectors and broadcasts. One
  // row takes a whole 128-column tile (8 panel streams) at once: a MoE expert's streams are
  // short (6 KiB per panel in a down projection), and more of them in flight keep memory busy.
  static constexpr uint32_t kMaxRows = 8;
  static constexpr uint32_t panels(uint32_t mr) { return mr <= 1 ? 8 : mr <= 4 ? 4 : 2; }
  template <Codes C>
  static constexpr uint32_t steps() { return C == Codes::w4 ? 4 : 2; }  // (k, k + 1) pairs
  template <Codes C>
  static constexpr float decode_offset() { return C == Codes::w4 ? 16.0f : 0.0f; }
  template <Codes C>
  static constexpr float value_scale() { return C == Codes::fp8 ? 256.0f : 1.0f; }

  template <Codes C, uint32_t R>
  static vw decode(vu unit) {
    if constexpr (C == Codes::w4) {
      // Per 16-bit word, nibble r moved to mantissa bits 3..6 under the exponent of 16: 16 + q.
      const __m512i shifted = R == 0 ? _mm512_slli_epi16(unit, 3) : _mm512_srli_epi16(unit, 4 * R - 3);
      return reinterpret_cast<__m512bh>(_mm512_ternarylogic_epi32(shifted, _mm512_set1_epi16(0x0078),
                                                                  _mm512_set1_epi16(0x4180), 0xea));  // (a & b) | c
    } else if constexpr (C == Codes::w8) {
      // An integer below 256 as f32 has 16 zero low bits: its high half is its exact bf16.
      const __m512i even = _mm512_castps_si512(_mm512_cvtepi32_ps(byte_of<2 * R>(unit)));
      const __m512i odd = _mm512_castps_si512(_mm512_cvtepi32_ps(byte_of<2 * R + 1>(unit)));
      return reinterpret_cast<__m512bh>(_mm512_or_si512(_mm512_srli_epi32(even, 16), odd));
    } else {
      // Bytes 2R and 2R + 1 of each lane into the high bytes of its two words.
      const __m512i pairs = _mm512_shuffle_epi8(unit, _mm512_broadcast_i32x4(R == 0
          ? _mm_setr_epi8(-128, 0, -128, 1, -128, 4, -128, 5, -128, 8, -128, 9, -128, 12, -128, 13)
          : _mm_setr_epi8(-128, 2, -128, 3, -128, 6, -128, 7, -128, 10, -128, 11, -128, 14, -128, 15)));
      const __m512i halves = fp8_f16_words(pairs);
      return _mm512_cvtne2ps_pbh(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(halves, 1)),
                                 _mm512_cvtph_ps(_mm512_castsi512_si256(halves)));
    }
  }
  static vx bcast(const uint16_t* p) {
    int32_t pair;
    __builtin_memcpy(&pair, p, sizeof pair);
    return reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
  }
  static va dot(va acc, vw w, vx x) { return _mm512_dpbf16_ps(acc, w, x); }
  template <Codes>
  static const uint16_t* prepare(const uint16_t* src, uint32_t, uint16_t*) { return src; }
  // The f32 sum of `len` (a multiple of 32) bf16 activations, from pairs against 1.0.
  static float group_sum(const uint16_t* p, uint32_t len) {
    const __m512bh one = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));
    __m512 c = _mm512_setzero_ps();
    for (uint32_t t = 0; t < len; t += 32)
      c = _mm512_dpbf16_ps(c, reinterpret_cast<__m512bh>(_mm512_loadu_si512(p + t)), one);
    return hsum(c);
  }
};

}  // namespace

SimdBodies bodies() {
  SimdBodies b;
  PanelKernels<Isa, Family::w4a16>::install(b);
  PanelKernels<Isa, Family::w4a16_zp>::install(b);
  PanelKernels<Isa, Family::w8a16>::install(b);
  PanelKernels<Isa, Family::fp8>::install(b);
  ActAvx512::set(b);
  QuantAvx512::set(b);
  return b;
}

}  // namespace metrale::cpu::avx512bf16
