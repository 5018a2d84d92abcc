// SPDX-License-Identifier: MIT OR Apache-2.0
// Bodies of the cpu-x86_64-avx2 tier (AVX2 + FMA + F16C): every GEMM family on the panel
// layouts (panel_layout.hpp) that this tier's repacks write at load, the loop structure
// panel_kernels.hpp's; the activations of act_avx2.hpp, the activation quantizers of
// quant_avx2.hpp and attention of attn_avx2.hpp. Compiled with -mavx2 -mfma -mf16c; called only
// after target detection found those features.
//
// A panel is two ymm halves of 8 columns. bf16 activations (Isa): each decoded vector is the
// f32 weights of one k, the operand of an FMA against the broadcast f32 activation:
// - 4-bit codes: a shift, an and and an or per k: the code moved to mantissa bits 19..22 under
//   the exponent of 16 is exactly the f32 value 16 + q;
// - 8-bit integers: the byte of each lane converted;
// - E4M3: two k at a time, the bytes as f16 of e4m3 / 256 (exact, subnormals included), each k's
//   8 halves gathered into one register and converted.
// int8 activations (IsaI8): codes and activations widened to 16 bits, `vpmaddwd` pairs summed
// into int32 lanes (exact; `vpmaddubsw` is avoided: its 16-bit sums of u8 x s8 pairs saturate).
#include <immintrin.h>

#include "act_avx2.hpp"
#include "attn_avx2.hpp"
#include "avx2_lanes.hpp"
#include "deltanet_avx2.hpp"
#include "panel_kernels.hpp"
#include "quant_avx2.hpp"

namespace metrale::cpu::avx2 {
namespace {

struct Avx2Ops : Avx2Lanes {
  using vf = __m256;
  using vu = __m256i;
  static constexpr uint32_t kLanes = 8;

  static __m256i lanes_below(uint32_t valid) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static vu load_codes(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static vu load_codes_tail(const uint8_t* p, uint32_t valid) {
    return _mm256_maskload_epi32(reinterpret_cast<const int*>(p), lanes_below(valid));
  }
  static vf set1(float value) { return _mm256_set1_ps(value); }
  static vf add(vf a, vf b) { return _mm256_add_ps(a, b); }
  static vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
  static vf fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
  static vf fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
  static vf loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, vf value) { _mm256_storeu_ps(p, value); }
  static vf scales_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static vf scales_f16_tail(const uint16_t* p, uint32_t valid) {
    alignas(16) uint16_t buf[8] = {};
    for (uint32_t c = 0; c < valid; ++c) buf[c] = p[c];
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
  }
  static vf scales_f32(const float* p) { return _mm256_loadu_ps(p); }
  static vf scales_f32_tail(const float* p, uint32_t valid) { return _mm256_maskload_ps(p, lanes_below(valid)); }
  static vf zeros(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static vf zeros_tail(const uint8_t* p, uint32_t valid) {
    alignas(8) uint8_t buf[8] = {};
    for (uint32_t c = 0; c < valid; ++c) buf[c] = p[c];
    return zeros(buf);
  }
  // A 16-byte shuffle control repeated in both 128-bit lanes.
  static __m256i control(__m128i lane) { return _mm256_broadcastsi128_si256(lane); }
};

struct Isa : Avx2Ops {
  using va = __m256;
  using vw = __m256;
  using vx = __m256;
  using Act = float;
  using Src = uint16_t;
  // Accumulators MR x 2 x panels <= 12 ymm, leaving room for a decoded vector, a broadcast and
  // the two constants (16 ymm in all). More panels for one row (8 accumulators) spill.
  static constexpr uint32_t kMaxRows = 6;
  static constexpr uint32_t panels(uint32_t mr) { return mr <= 2 ? 2 : 1; }
  template <Codes C>
  static constexpr uint32_t steps() { return C == Codes::w4 ? 8 : C == Codes::bf16 || C == Codes::f16 ? 2 : 4; }  // one k per step
  template <Codes C>
  static constexpr float decode_offset() { return C == Codes::w4 ? 16.0f : 0.0f; }
  template <Codes C>
  static constexpr float value_scale() { return C == Codes::fp8 ? 256.0f : 1.0f; }
  static va zero_acc() { return _mm256_setzero_ps(); }
  static vf to_f32(va acc) { return acc; }

  template <Codes C, uint32_t S>
  static vw decode(vu unit) {
    if constexpr (C == Codes::w4) {
      // k = 2r at bits 4r, k = 2r + 1 at bits 16 + 4r; moved to bits 19..22, masked, under 16.0f.
      constexpr int kShift = S % 2 == 0 ? 19 - 4 * static_cast<int>(S / 2) : 3 - 4 * static_cast<int>(S / 2);
      const __m256i shifted = kShift >= 0 ? _mm256_slli_epi32(unit, kShift) : _mm256_srli_epi32(unit, -kShift);
      return _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(shifted, _mm256_set1_epi32(0x00780000)),
                                                 _mm256_set1_epi32(0x41800000)));
    } else if constexpr (C == Codes::w8) {
      const __m256i byte = S == 3 ? _mm256_srli_epi32(unit, 24)
                                  : _mm256_and_si256(_mm256_srli_epi32(unit, 8 * S), _mm256_set1_epi32(0xff));
      return _mm256_cvtepi32_ps(byte);
    } else if constexpr (C == Codes::bf16) {  // k = 2u + S in half S of each lane: its f32 bits
      return _mm256_castsi256_ps(S == 0 ? _mm256_slli_epi32(unit, 16) : _mm256_and_si256(unit, _mm256_set1_epi32(-65536)));
    } else if constexpr (C == Codes::f16) {  // half S of each lane, narrowed (packus: < 2^16) and widened
      const __m256i half = S == 0 ? _mm256_and_si256(unit, _mm256_set1_epi32(0xffff)) : _mm256_srli_epi32(unit, 16);
      return _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1)));
    } else {
      // Per 128-bit lane: byte S & ~1 of its four lanes into the high bytes of words 0..3, byte
      // S | 1 into words 4..7 (shared by the pair's two steps); this step's four words of each
      // lane then joined into 8 halves.
      const __m256i pairs = _mm256_shuffle_epi8(unit, control(S < 2
          ? _mm_setr_epi8(-128, 0, -128, 4, -128, 8, -128, 12, -128, 1, -128, 5, -128, 9, -128, 13)
          : _mm_setr_epi8(-128, 2, -128, 6, -128, 10, -128, 14, -128, 3, -128, 7, -128, 11, -128, 15)));
      const __m256i halves = _mm256_and_si256(_mm256_srai_epi16(pairs, 1), _mm256_set1_epi16(static_cast<short>(0xbf80)));
      const __m256i joined = _mm256_permute4x64_epi64(halves, S % 2 == 0 ? 0x08 : 0x0d);  // qwords (0, 2) or (1, 3)
      return _mm256_cvtph_ps(_mm256_castsi256_si128(joined));
    }
  }
  static vx bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static va dot(va acc, vw w, vx x) { return _mm256_fmadd_ps(w, x, acc); }

  // E4M3 activation codes as bf16, e4m3_to_bf16's arithmetic in ymm registers (GCC lowered that
  // generic code's NaN compare to scalar code here: a fifth of a block-FP8 decode block).
  static void widen_e4m3(const uint8_t* src, uint32_t len, uint16_t* dst) {
    const auto eight = [](const uint8_t* p) {
      const __m256i code = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      const __m256i magnitude = _mm256_and_si256(code, _mm256_set1_epi32(0x7f));
      const __m256 value = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(magnitude, 20)), _mm256_set1_ps(0x1p120f));
      const __m256i nan = _mm256_cmpeq_epi32(magnitude, _mm256_set1_epi32(0x7f));
      const __m256i bits = _mm256_blendv_epi8(_mm256_srli_epi32(_mm256_castps_si256(value), 16), _mm256_set1_epi32(0x7fc0), nan);
      return _mm256_or_si256(bits, _mm256_slli_epi32(_mm256_and_si256(code, _mm256_set1_epi32(0x80)), 8));
    };
    for (uint32_t t = 0; t < len; t += 16) {
      // packus joins per 128-bit lane: (0..3, 8..11, 4..7, 12..15) back into order.
      const __m256i packed = _mm256_packus_epi32(eight(src + t), eight(src + t + 8));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + t), _mm256_permute4x64_epi64(packed, 0xd8));
    }
  }

  // bf16 -> f32 is a 16-bit shift.
  template <Codes>
  static const float* prepare(const uint16_t* src, uint32_t len, float* dst) {
    for (uint32_t t = 0; t < len; t += 8) _mm256_storeu_ps(dst + t, load_bf16(src + t));
    return dst;
  }
  static float group_sum(const float* p, uint32_t len) {
    __m256 s[4];
#pragma GCC unroll 4
    for (uint32_t t = 0; t < 4; ++t) s[t] = _mm256_loadu_ps(p + 8 * t);
    for (uint32_t t = 32; t < len; t += 32)
#pragma GCC unroll 4
      for (uint32_t u = 0; u < 4; ++u) s[u] = _mm256_add_ps(s[u], _mm256_loadu_ps(p + t + 8 * u));
    return hsum(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])));
  }
};

// FP8 weights against E4M3 activations (fp8_gemm_a8*): the activations are E4M3 values, so
// |x| <= 448, and an integer decode of the weights is safe without F16C. A code's sign and low 7
// bits placed at f32 bits 31 and 20..26 are the f32 e4m3(q) * 2^-120 (an E4M3 subnormal becomes
// an f32 subnormal: exact while MXCSR leaves denormals alone, as e4m3_to_bf16 assumes too). The
// prepared activations carry 2^60 and the scales the other 2^60: every product then lies within
// [2^-78, 2^77], far from f32's subnormals and its overflow. Three integer ops per k instead of
// the F16C path's shuffle, lane join and two-uop conversion: a Zen 3 core decodes about twice
// the bytes per second (block-FP8 MoE decode was bound by the decode, not by memory).
struct IsaE4 : Isa {
  template <Codes C>
  static constexpr float value_scale() {
    static_assert(C == Codes::fp8, "E4M3 activations meet FP8 weights only here");
    return 0x1p60f;
  }
  template <Codes C, uint32_t S>
  static vw decode(vu unit) {
    // Byte S's top bit to bit 31 (shift left), then down 4 with the sign copied (arithmetic):
    // its low 7 bits land on 20..26, the copies on 27..30 are masked off.
    const __m256i top = S == 3 ? unit : _mm256_slli_epi32(unit, 24 - 8 * static_cast<int>(S));
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(top, 4), _mm256_set1_epi32(static_cast<int>(0x87f00000u))));
  }
  template <Codes C>
  static const float* prepare(const uint16_t* src, uint32_t len, float* dst) {
    for (uint32_t t = 0; t < len; t += 8) _mm256_storeu_ps(dst + t, _mm256_mul_ps(load_bf16(src + t), _mm256_set1_ps(0x1p60f)));
    return dst;
  }
};

struct IsaI8 : Avx2Ops {
  using va = __m256i;
  using vw = __m256i;
  using vx = __m256i;
  using Act = int16_t;  // int8 activations widened
  using Src = int8_t;
  // Accumulators MR x 2 x panels <= 8 ymm; each dot step needs a product register besides.
  static constexpr uint32_t kMaxRows = 4;
  static constexpr uint32_t panels(uint32_t mr) { return mr <= 2 ? 2 : 1; }
  template <Codes C>
  static constexpr uint32_t steps() { return C == Codes::w4 ? 4 : 2; }  // (k, k + 1) pairs
  template <Codes>
  static constexpr float decode_offset() { return 0.0f; }
  template <Codes>
  static constexpr float value_scale() { return 1.0f; }
  static va zero_acc() { return _mm256_setzero_si256(); }
  static vf to_f32(va acc) { return _mm256_cvtepi32_ps(acc); }

  template <Codes C, uint32_t S>
  static vw decode(vu unit) {
    if constexpr (C == Codes::w4) {  // words (q[2S], q[2S + 1]): nibble S of each half
      const __m256i shifted = S == 0 ? unit : _mm256_srli_epi32(unit, 4 * S);
      return _mm256_and_si256(shifted, _mm256_set1_epi32(0x000f000f));
    } else {  // words (q[2S], q[2S + 1]): bytes 2S and 2S + 1, zero-extended
      return _mm256_shuffle_epi8(unit, control(S == 0
          ? _mm_setr_epi8(0, -128, 1, -128, 4, -128, 5, -128, 8, -128, 9, -128, 12, -128, 13, -128)
          : _mm_setr_epi8(2, -128, 3, -128, 6, -128, 7, -128, 10, -128, 11, -128, 14, -128, 15, -128)));
    }
  }
  static vx bcast(const int16_t* p) {
    int32_t pair;
    __builtin_memcpy(&pair, p, sizeof pair);
    return _mm256_set1_epi32(pair);
  }
  static va dot(va acc, vw w, vx x) { return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x)); }
  template <Codes>
  static const int16_t* prepare(const int8_t* src, uint32_t len, int16_t* dst) {
    for (uint32_t t = 0; t < len; t += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + t),
                          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + t))));
    return dst;
  }
  static float group_sum(const int16_t* p, uint32_t len) {
    __m256i s = _mm256_setzero_si256();
    for (uint32_t t = 0; t < len; t += 16)
      s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + t)),
                                                _mm256_set1_epi16(1)));
    return hsum(_mm256_cvtepi32_ps(s));  // |sum| <= 127 * 128: exact in f32
  }
};

}  // namespace

SimdBodies bodies() {
  SimdBodies b;
  PanelKernels<Isa, Family::w4a16>::install(b);
  PanelKernels<Isa, Family::w4a16_zp>::install(b);
  PanelKernels<Isa, Family::w8a16>::install(b);
  PanelKernels<Isa, Family::fp8>::install(b);
  PanelKernels<IsaE4, Family::fp8_a8>::install(b);
  PanelKernels<IsaE4, Family::fp8_a8_group128>::install(b);
  PanelKernels<Isa, Family::w4afp8>::install(b);
  PanelKernels<Isa, Family::bf16>::install(b);
  PanelKernels<Isa, Family::f16>::install(b);
  PanelKernels<IsaI8, Family::w4a8>::install(b);
  PanelKernels<IsaI8, Family::w8a8>::install(b);
  ActAvx2::set(b);
  QuantAvx2::set(b);
  AttnAvx2::set(b);
  DeltanetAvx2::set(b);
  return b;
}

}  // namespace metrale::cpu::avx2
