// SPDX-License-Identifier: MIT OR Apache-2.0
// The FP8 family (fp8_gemv, fp8_gemm, fp8_grouped_gemm, fp8_grouped_gemv, fp8_repack, and the
// E4M3-activation fp8_gemm_a8* / fp8_grouped_gemm_a8*) for the
// cpu-x86_64-avx512bf16 tier: E4M3 codes decoded to bf16 pairs by table lookups (`vpermi2b`,
// AVX-512 VBMI; bf16_isa.hpp), the loop structure panel_kernels.hpp's. Compiled with
// -mavx512vbmi in a unit of its own and chosen at create() only when the CPU has VBMI; without it
// the tier runs the avx512 tier's FP8 bodies (f32 FMA on codes converted through f16).
#include "intrinsics.hpp"  // first: before any header that includes <immintrin.h>

#include "bf16_isa.hpp"

namespace metrale::cpu::avx512vbmi {

SimdBodies bodies() {
  SimdBodies b;
  PanelKernels<Bf16Isa, Family::fp8>::install(b);
  PanelKernels<Bf16Isa, Family::fp8_a8>::install(b);
  PanelKernels<Bf16Isa, Family::fp8_a8_group128>::install(b);
  return b;
}

}  // namespace metrale::cpu::avx512vbmi
