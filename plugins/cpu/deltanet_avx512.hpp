// SPDX-License-Identifier: MIT OR Apache-2.0
// The deltanet module's bodies on the AVX-512 tiers: delta_rule_chunked and delta_rule_recurrent
// in zmm registers (deltanet_simd.hpp over 16 f32 lanes; AVX2's 8 lanes where k_dim or v_dim is a
// multiple of 8 only; the baseline's scalar bodies for other dims). Internal linkage on purpose
// (see numeric.hpp): included by each AVX-512 tier's TU, compiled with its flags.
#pragma once

#include <immintrin.h>

#include "act_avx512.hpp"
#include "deltanet_avx2.hpp"
#include "deltanet_simd.hpp"

namespace metrale::cpu {
namespace {

struct DeltaOpsAvx512 {
  using vf = __m512;
  static constexpr uint32_t kLanes = 16;
  // GEMM tiles: 4 rows x 4 vectors = 16 accumulators, 4 loads of B and a broadcast beside.
  static constexpr uint32_t kRows = 4, kVecs = 4;

  static vf zero() { return _mm512_setzero_ps(); }
  static vf set1(float x) { return _mm512_set1_ps(x); }
  static vf load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, vf x) { _mm512_storeu_ps(p, x); }
  static vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
  static vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
  static vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
  static vf fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
  static float hsum(vf x) { return _mm512_reduce_add_ps(x); }
  // Lanes [0, count) of x, the others 0 (count may lie outside [0, 16]).
  static vf first(vf x, int count) {
    const __mmask16 m = count <= 0 ? 0 : count >= 16 ? 0xffff : static_cast<__mmask16>((1u << count) - 1u);
    return _mm512_maskz_mov_ps(m, x);
  }
  // e^x for x <= 0 (lanes of a positive x are masked off by the caller); 0 below -87.
  static vf exp_nonpositive(vf x) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ), ActAvx512::exp(x));
  }
  static vf load_bf16(const uint16_t* p) { return ActAvx512::load_bf16(p, 0xffff); }
  static void store_bf16(uint16_t* p, vf x) { ActAvx512::store_bf16(p, x, 0xffff); }
};

struct DeltanetAvx512 {
  static void delta_rule_chunked(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const DeltaCall c = delta_call(args);
    if (DeltaChunkedSimd<DeltaOpsAvx512>::fits(c))
      DeltaChunkedSimd<DeltaOpsAvx512>::run(c, bx, by, scratch);
    else
      DeltanetAvx2::delta_rule_chunked(args, bx, by, scratch);
  }
  static void delta_rule_recurrent(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const DeltaCall c = delta_call(args);
    if (DeltaChunkedSimd<DeltaOpsAvx512>::fits(c))
      DeltaRecurrentSimd<DeltaOpsAvx512>::run(c, bx, by, scratch);
    else
      DeltanetAvx2::delta_rule_recurrent(args, bx, by, scratch);
  }
  static void set(SimdBodies& b) {
    b[Simd::delta_rule_chunked] = &delta_rule_chunked;
    b[Simd::delta_rule_recurrent] = &delta_rule_recurrent;
  }
};

}  // namespace
}  // namespace metrale::cpu
