// SPDX-License-Identifier: MIT OR Apache-2.0
// The int8-activation families (w4a8, w8a8) for the cpu-x86_64-avx512bf16 tier, on AVX-512 VNNI
// `vpdpbusd`: each int32 lane c accumulates four u8 codes of column c times four s8 activations,
// exactly (no saturation: the four products are summed in 32 bits). Compiled with
// -mavx512vnni in a unit of its own, and chosen at create() only when the CPU has VNNI (every
// CPU with AVX512_BF16 so far has it); without it the tier runs the avx512 tier's int8 bodies.
//
// - 8-bit codes: a lane of a unit is the four bytes k .. k + 3 of a column, the operand as is;
// - 4-bit codes: the panel lane's nibbles masked into bytes, (k0, k4, k1, k5) and, shifted,
//   (k2, k6, k3, k7); the activations are prepared in that order per 8-wide block of K.
#include "intrinsics.hpp"  // first: before any header that includes <immintrin.h>

#include "avx512_panel_ops.hpp"
#include "panel_kernels.hpp"

namespace metrale::cpu::avx512vnni {
namespace {

struct Isa : Avx512PanelOps, Avx512IntAcc {
  using vw = __m512i;
  using vx = __m512i;
  using Act = int8_t;
  using Src = int8_t;
  // Accumulators MR x panels <= 24 zmm, the decoded vectors and a broadcast besides.
  static constexpr uint32_t kMaxRows = 8;
  static constexpr uint32_t panels(uint32_t mr) { return mr <= 1 ? 8 : mr <= 4 ? 4 : 2; }
  template <Codes C>
  static constexpr uint32_t steps() { return C == Codes::w4 ? 2 : 1; }  // four k per step
  template <Codes>
  static constexpr float decode_offset() { return 0.0f; }
  template <Codes>
  static constexpr float value_scale() { return 1.0f; }

  template <Codes C, uint32_t S>
  static vw decode(vu unit) {
    if constexpr (C == Codes::w4) {
      const __m512i shifted = S == 0 ? unit : _mm512_srli_epi32(unit, 4);
      return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0f));
    } else {
      return unit;
    }
  }
  static vx bcast(const int8_t* p) {
    int32_t quad;
    __builtin_memcpy(&quad, p, sizeof quad);
    return _mm512_set1_epi32(quad);
  }
  // In assembly: GCC 12 does not tie the intrinsic's accumulator to its result in these loops
  // (each step copied the accumulator out and back and kept a copy on the stack: half speed).
  static va dot(va acc, vw w, vx x) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
    return acc;
  }
  // 4-bit codes: each 8-wide block of K as (x0, x4, x1, x5, x2, x6, x3, x7); 8-bit: in place.
  template <Codes C>
  static const int8_t* prepare(const int8_t* src, uint32_t len, int8_t* dst) {
    if constexpr (C != Codes::w4) {
      return src;
    } else {
      const __m512i order = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15));
      for (uint32_t t = 0; t < len; t += 64)
        _mm512_storeu_si512(dst + t, _mm512_shuffle_epi8(_mm512_loadu_si512(src + t), order));
      return dst;
    }
  }
  static float group_sum(const int8_t* p, uint32_t len) { return group_sum_i8(p, len); }
};

}  // namespace

SimdBodies bodies() {
  SimdBodies b;
  PanelKernels<Isa, Family::w4a8>::install(b);
  PanelKernels<Isa, Family::w8a8>::install(b);
  return b;
}

}  // namespace metrale::cpu::avx512vnni
