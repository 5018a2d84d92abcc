// SPDX-License-Identifier: MIT OR Apache-2.0
// The deltanet module's bodies on the AVX2 tier (and the AVX-512 tiers' for dims that are
// multiples of 8 but not of 16): delta_rule_chunked and delta_rule_recurrent in ymm registers
// (deltanet_simd.hpp over 8 f32 lanes; the baseline's scalar bodies for other dims). Internal linkage on purpose (see
// numeric.hpp): included by the SIMD tiers' TUs, compiled with their flags.
#pragma once

#include <immintrin.h>

#include "act_avx2.hpp"
#include "deltanet_simd.hpp"

namespace metrale::cpu {
namespace {

struct DeltaOpsAvx2 {
  using vf = __m256;
  static constexpr uint32_t kLanes = 8;
  // GEMM tiles: 4 rows x 2 vectors = 8 accumulators, 2 loads of B and a broadcast beside (16 ymm).
  static constexpr uint32_t kRows = 4, kVecs = 2;

  static vf zero() { return _mm256_setzero_ps(); }
  static vf set1(float x) { return _mm256_set1_ps(x); }
  static vf load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, vf x) { _mm256_storeu_ps(p, x); }
  static vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
  static vf sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
  static vf fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
  static vf fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
  static float hsum(vf x) { return Avx2Lanes::hsum(x); }
  // Lanes [0, count) of x, the others 0 (count may lie outside [0, 8]).
  static vf first(vf x, int count) {
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_and_ps(x, _mm256_castsi256_ps(keep));
  }
  // e^x for x <= 0 (lanes of a positive x are masked off by the caller); 0 below -87.
  static vf exp_nonpositive(vf x) {
    return _mm256_and_ps(ActAvx2::exp(x), _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ));
  }
  static vf load_bf16(const uint16_t* p) { return Avx2Lanes::load_bf16(p); }
  static void store_bf16(uint16_t* p, vf x) { ActAvx2::store_bf16(p, x); }
};

struct DeltanetAvx2 {
  static void delta_rule_chunked(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const DeltaCall c = delta_call(args);
    if (DeltaChunkedSimd<DeltaOpsAvx2>::fits(c))
      DeltaChunkedSimd<DeltaOpsAvx2>::run(c, bx, by, scratch);
    else
      baseline::delta_rule_chunked(args, bx, by, scratch);
  }
  static void delta_rule_recurrent(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const DeltaCall c = delta_call(args);
    if (DeltaChunkedSimd<DeltaOpsAvx2>::fits(c))
      DeltaRecurrentSimd<DeltaOpsAvx2>::run(c, bx, by, scratch);
    else
      baseline::delta_rule_recurrent(args, bx, by, scratch);
  }
  static void set(SimdBodies& b) {
    b[Simd::delta_rule_chunked] = &delta_rule_chunked;
    b[Simd::delta_rule_recurrent] = &delta_rule_recurrent;
  }
};

}  // namespace
}  // namespace metrale::cpu
