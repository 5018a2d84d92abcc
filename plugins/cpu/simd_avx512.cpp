// SPDX-License-Identifier: MIT OR Apache-2.0
// Bodies of the cpu-x86_64-avx512 tier (AVX-512 F/BW/VL, with AVX2, FMA, F16C): every GEMM
// family on the panel layouts (panel_layout.hpp) that this tier's repacks write at load, the
// loop structure panel_kernels.hpp's; the activations of act_avx512.hpp; the activation
// quantizers of quant_avx512.hpp; attn_decode of attn_avx512.hpp and attn_prefill of
// attn_avx2.hpp. Compiled with the matching -m flags; called only after target detection found
// them.
//
// bf16 activations (Isa): a panel is one zmm of 16 columns, each decoded vector the f32 weights
// of one k, the operand of an FMA against the broadcast f32 activation:
// - 4-bit codes: one shift and one ternary-logic op per k: the code moved to mantissa bits
//   19..22 under the exponent of 16 is exactly the f32 value 16 + q;
// - 8-bit integers: the byte of each lane converted;
// - E4M3: two k at a time, the bytes as f16 of e4m3 / 256 (exact, subnormals included), each k's
//   16 halves narrowed out of the lanes and converted.
// int8 activations (IsaI8): codes and activations widened to 16 bits, `vpmaddwd` pairs summed
// into int32 lanes (exact; `vpmaddubsw` is avoided: its 16-bit sums of u8 x s8 pairs saturate).
#include "intrinsics.hpp"  // first: before any header that includes <immintrin.h>

#include "act_avx512.hpp"
#include "attn_avx2.hpp"
#include "attn_avx512.hpp"
#include "decoder_avx512.hpp"
#include "deltanet_avx512.hpp"
#include "avx512_panel_ops.hpp"
#include "panel_kernels.hpp"
#include "quant_avx512.hpp"

namespace metrale::cpu::avx512 {
namespace {

struct Isa : Avx512PanelOps, Avx512FloatAcc {
  using vw = __m512;
  using vx = __m512;
  using Act = float;
  using Src = uint16_t;
  // Accumulators MR x panels <= 24 zmm, leaving room for the decoded vectors and constants;
  // 16 rows of one panel for tall blocks (one decode per 16 FMAs). Measured on Zen 4.
  static constexpr uint32_t kMaxRows = 16;
  static constexpr uint32_t panels(uint32_t mr) { return mr <= 4 ? 4 : mr <= 8 ? 3 : 1; }
  template <Codes C>
  static constexpr uint32_t steps() { return C == Codes::w4 ? 8 : C == Codes::bf16 || C == Codes::f16 ? 2 : 4; }  // one k per step
  template <Codes C>
  static constexpr float decode_offset() { return C == Codes::w4 ? 16.0f : 0.0f; }
  template <Codes C>
  static constexpr float value_scale() { return C == Codes::fp8 ? 256.0f : 1.0f; }

  template <Codes C, uint32_t S>
  static vw decode(vu unit) {
    if constexpr (C == Codes::w4) {
      // k = 2r at bits 4r, k = 2r + 1 at bits 16 + 4r; moved to bits 19..22, masked, under 16.0f.
      constexpr int kShift = S % 2 == 0 ? 19 - 4 * static_cast<int>(S / 2) : 3 - 4 * static_cast<int>(S / 2);
      const __m512i shifted = kShift >= 0 ? _mm512_slli_epi32(unit, kShift) : _mm512_srli_epi32(unit, -kShift);
      return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(shifted, _mm512_set1_epi32(0x00780000),
                                                           _mm512_set1_epi32(0x41800000), 0xea));  // (a & b) | c
    } else if constexpr (C == Codes::w8) {
      return _mm512_cvtepi32_ps(byte_of<S>(unit));
    } else if constexpr (C == Codes::bf16) {  // k = 2u + S in half S of each lane: its f32 bits
      return _mm512_castsi512_ps(S == 0 ? _mm512_slli_epi32(unit, 16) : _mm512_and_si512(unit, _mm512_set1_epi32(-65536)));
    } else if constexpr (C == Codes::f16) {  // half S of each lane, narrowed and widened (exact)
      return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(S == 0 ? unit : _mm512_srli_epi32(unit, 16)));
    } else {
      // Bytes S & ~1 and S | 1 of each lane into the high bytes of its two words (shared by the
      // two steps of the pair), then this step's word of every lane narrowed into 16 halves.
      const __m512i pairs = _mm512_shuffle_epi8(unit, _mm512_broadcast_i32x4(S < 2
          ? _mm_setr_epi8(-128, 0, -128, 1, -128, 4, -128, 5, -128, 8, -128, 9, -128, 12, -128, 13)
          : _mm_setr_epi8(-128, 2, -128, 3, -128, 6, -128, 7, -128, 10, -128, 11, -128, 14, -128, 15)));
      const __m512i halves = fp8_f16_words(pairs);
      return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(S % 2 == 0 ? halves : _mm512_srli_epi32(halves, 16)));
    }
  }
  static vx bcast(const float* p) { return _mm512_set1_ps(*p); }
  static va dot(va acc, vw w, vx x) { return _mm512_fmadd_ps(w, x, acc); }

  // bf16 -> f32 is a 16-bit shift.
  template <Codes>
  static const float* prepare(const uint16_t* src, uint32_t len, float* dst) {
    for (uint32_t t = 0; t < len; t += 16) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + t));
      _mm512_storeu_ps(dst + t, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16)));
    }
    return dst;
  }
  static float group_sum(const float* p, uint32_t len) {
    __m512 s[2] = {_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)};
    for (uint32_t t = 32; t < len; t += 32) {
      s[0] = _mm512_add_ps(s[0], _mm512_loadu_ps(p + t));
      s[1] = _mm512_add_ps(s[1], _mm512_loadu_ps(p + t + 16));
    }
    return hsum(_mm512_add_ps(s[0], s[1]));
  }
};

struct IsaI8 : Avx512PanelOps, Avx512IntAcc {
  using vw = __m512i;
  using vx = __m512i;
  using Act = int16_t;  // int8 activations widened
  using Src = int8_t;
  // Accumulators MR x panels <= 16 zmm; each dot step needs a product register besides.
  static constexpr uint32_t kMaxRows = 8;
  static constexpr uint32_t panels(uint32_t mr) { return mr <= 2 ? 4 : 2; }
  template <Codes C>
  static constexpr uint32_t steps() { return C == Codes::w4 ? 4 : 2; }  // (k, k + 1) pairs
  template <Codes>
  static constexpr float decode_offset() { return 0.0f; }
  template <Codes>
  static constexpr float value_scale() { return 1.0f; }

  template <Codes C, uint32_t S>
  static vw decode(vu unit) {
    if constexpr (C == Codes::w4) {  // words (q[2S], q[2S + 1]): nibble S of each half
      const __m512i shifted = S == 0 ? unit : _mm512_srli_epi32(unit, 4 * S);
      return _mm512_and_si512(shifted, _mm512_set1_epi32(0x000f000f));
    } else {  // words (q[2S], q[2S + 1]): bytes 2S and 2S + 1, zero-extended
      return _mm512_shuffle_epi8(unit, _mm512_broadcast_i32x4(S == 0
          ? _mm_setr_epi8(0, -128, 1, -128, 4, -128, 5, -128, 8, -128, 9, -128, 12, -128, 13, -128)
          : _mm_setr_epi8(2, -128, 3, -128, 6, -128, 7, -128, 10, -128, 11, -128, 14, -128, 15, -128)));
    }
  }
  static vx bcast(const int16_t* p) {
    int32_t pair;
    __builtin_memcpy(&pair, p, sizeof pair);
    return _mm512_set1_epi32(pair);
  }
  static va dot(va acc, vw w, vx x) { return _mm512_add_epi32(acc, _mm512_madd_epi16(w, x)); }
  template <Codes>
  static const int16_t* prepare(const int8_t* src, uint32_t len, int16_t* dst) {
    for (uint32_t t = 0; t < len; t += 32)
      _mm512_storeu_si512(dst + t, _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + t))));
    return dst;
  }
  static float group_sum(const int16_t* p, uint32_t len) {
    __m512i s = _mm512_setzero_si512();
    for (uint32_t t = 0; t < len; t += 32)
      s = _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_loadu_si512(p + t), _mm512_set1_epi16(1)));
    return hsum(_mm512_cvtepi32_ps(s));  // |sum| <= 127 * 128: exact in f32
  }
};

}  // namespace

SimdBodies bodies() {
  SimdBodies b;
  PanelKernels<Isa, Family::w4a16>::install(b);
  PanelKernels<Isa, Family::w4a16_zp>::install(b);
  PanelKernels<Isa, Family::w8a16>::install(b);
  PanelKernels<Isa, Family::fp8>::install(b);
  PanelKernels<Isa, Family::fp8_a8>::install(b);
  PanelKernels<Isa, Family::fp8_a8_group128>::install(b);
  PanelKernels<Isa, Family::w4afp8>::install(b);
  PanelKernels<Isa, Family::bf16>::install(b);
  PanelKernels<Isa, Family::f16>::install(b);
  PanelKernels<IsaI8, Family::w4a8>::install(b);
  PanelKernels<IsaI8, Family::w8a8>::install(b);
  ActAvx512::set(b);
  QuantAvx512::set(b);
  AttnAvx512::set(b);
  b[Simd::attn_prefill] = &AttnAvx2::attn_prefill;  // 8 lanes, rather than the baseline's scalar loops
  DecoderAvx512::set(b);
  DeltanetAvx512::set(b);
  return b;
}

}  // namespace metrale::cpu::avx512
