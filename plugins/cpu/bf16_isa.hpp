// SPDX-License-Identifier: MIT OR Apache-2.0
// The panel Isa of the cpu-x86_64-avx512bf16 tier (see panel_kernels.hpp for the interface),
// shared by simd_avx512bf16.cpp (the integer-code families) and fp8_avx512vbmi.cpp (the FP8
// family, whose decoder needs AVX-512 VBMI). Every decoder yields bf16 pairs
// (w[c][k], w[c][k + 1]) in lane c, exact, the operand of `vdpbf16ps` against a broadcast
// activation pair (32 multiply-adds per instruction, twice an f32 FMA's):
// - 4-bit codes: one shift and one ternary-logic op per pair step r: 16 + q[2r], 16 + q[2r + 1];
// - 8-bit integers: the two bytes as f32 (exact), whose high halves are their bf16;
// - bf16 weights: the unit as it is (f16 weights have no exact bf16: the avx512 tier's bodies);
// - E4M3 (VBMI only): the bf16 of every byte of a unit looked up at once, its low and high bytes
//   from two 128-entry tables (`vpermi2b`, the sign put back with one ternary-logic op), then
//   each step's pairs gathered by one more two-source byte permute: five instructions per unit.
// Note: vdpbf16ps treats subnormal bf16 inputs as zero (DAZ); activations (and bf16 weights)
// below 2^-126 in magnitude contribute nothing on this tier.
//
// Internal linkage on purpose (see numeric.hpp): each TU compiles its own copy with its flags.
#pragma once

#include <immintrin.h>

#include "avx512_panel_ops.hpp"
#include "panel_kernels.hpp"

namespace metrale::cpu {
namespace {

// E4M3 code b (sign bit clear) as bf16 bits: exact (subnormals normalised); 0x7f is NaN.
constexpr uint16_t e4m3_bf16_bits(uint32_t b) {
  const uint32_t exponent = b >> 3, mantissa = b & 7;
  if (b == 0x7f) return 0x7fc0;
  if (exponent != 0) return static_cast<uint16_t>(((exponent + 120) << 7) | (mantissa << 4));  // 127 - 7
  if (mantissa == 0) return 0;
  uint32_t e = 127 - 9 + 3, m = mantissa;  // m / 8 * 2^(e - 127) = mantissa * 2^-9
  while (m < 8) {
    m <<= 1;
    --e;
  }
  return static_cast<uint16_t>((e << 7) | ((m & 7) << 4));
}

// The lookup and gather tables of the E4M3 decoder, 64 bytes each.
struct Fp8Tables {
  alignas(64) uint8_t low[2][64], high[2][64];  // bf16 bytes of codes 0..63 and 64..127
  alignas(64) uint8_t pairs[2][64];             // step S: lane c = (lo, hi) of bytes 4c + 2S, 4c + 2S + 1
};
constexpr Fp8Tables make_fp8_tables() {
  Fp8Tables t{};
  for (uint32_t b = 0; b < 128; ++b) {
    t.low[b / 64][b % 64] = static_cast<uint8_t>(e4m3_bf16_bits(b) & 0xff);
    t.high[b / 64][b % 64] = static_cast<uint8_t>(e4m3_bf16_bits(b) >> 8);
  }
  for (uint32_t s = 0; s < 2; ++s)
    for (uint32_t c = 0; c < 16; ++c)
      for (uint32_t p = 0; p < 4; ++p)  // low, high of k = 2s, then of k = 2s + 1; high bytes from the second source
        t.pairs[s][4 * c + p] = static_cast<uint8_t>(4 * c + 2 * s + p / 2 + (p % 2 ? 64 : 0));
  return t;
}
constexpr Fp8Tables kFp8Tables = make_fp8_tables();

struct Bf16Isa : Avx512PanelOps, Avx512FloatAcc {
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
  static constexpr uint32_t steps() { return C == Codes::w4 ? 4 : C == Codes::bf16 ? 1 : 2; }  // (k, k + 1) pairs
  template <Codes C>
  static constexpr float decode_offset() { return C == Codes::w4 ? 16.0f : 0.0f; }
  template <Codes>
  static constexpr float value_scale() { return 1.0f; }

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
    } else if constexpr (C == Codes::bf16) {  // a lane is already the pair (w[c][k], w[c][k + 1])
      return reinterpret_cast<__m512bh>(unit);
    } else {
#if defined(__AVX512VBMI__)
      // The lookups are the same for both steps of a unit (the compiler computes them once).
      const auto table = [](const uint8_t* p) { return _mm512_load_si512(p); };
      const __m512i low = _mm512_permutex2var_epi8(table(kFp8Tables.low[0]), unit, table(kFp8Tables.low[1]));
      __m512i high = _mm512_permutex2var_epi8(table(kFp8Tables.high[0]), unit, table(kFp8Tables.high[1]));
      high = _mm512_ternarylogic_epi32(high, unit, _mm512_set1_epi8(static_cast<char>(0x80)), 0xf8);  // a | (b & c)
      return reinterpret_cast<__m512bh>(_mm512_permutex2var_epi8(low, table(kFp8Tables.pairs[R]), high));
#else
      static_assert(C != Codes::fp8, "the FP8 decoder of this Isa needs AVX-512 VBMI (fp8_avx512vbmi.cpp)");
      return vw{};
#endif
    }
  }
#if defined(__AVX512VBMI__)
  // E4M3 activations as bf16 (panel_kernels.hpp's e4m3_to_bf16, same bits), 64 codes per step:
  // the decoder's two table lookups, then the low and high bytes interleaved in order.
  static void widen_e4m3(const uint8_t* src, uint32_t len, uint16_t* dst) {
    const auto table = [](const uint8_t* p) { return _mm512_load_si512(p); };
    const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (uint32_t t = 0; t < len; t += 64) {
      const __m512i codes = _mm512_loadu_si512(src + t);
      const __m512i low = _mm512_permutex2var_epi8(table(kFp8Tables.low[0]), codes, table(kFp8Tables.low[1]));
      __m512i high = _mm512_permutex2var_epi8(table(kFp8Tables.high[0]), codes, table(kFp8Tables.high[1]));
      high = _mm512_ternarylogic_epi32(high, codes, _mm512_set1_epi8(static_cast<char>(0x80)), 0xf8);  // a | (b & c)
      // Per 128-bit lane: unpacklo holds codes 0..7 of the lane, unpackhi 8..15.
      const __m512i lo = _mm512_unpacklo_epi8(low, high), hi = _mm512_unpackhi_epi8(low, high);
      _mm512_storeu_si512(dst + t, _mm512_permutex2var_epi64(lo, first, hi));
      _mm512_storeu_si512(dst + t + 32, _mm512_permutex2var_epi64(lo, second, hi));
    }
  }
#endif
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
}  // namespace metrale::cpu
