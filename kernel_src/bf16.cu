// SPDX-License-Identifier: MIT OR Apache-2.0
// Modules `bf16` and `f16` (docs/kernels.md, "Plain 16-bit float weights"): bf16 activations,
// unquantized weights in their canonical layouts bf16-nk / f16-nk (the values, [N][K]), read as
// they are (no repack). y = Σ_k x·w with every product exact in f32, f32 sums, one rounding to
// bf16. Both modules compile this source; each lists its own three kernels. Needs sm_80.
//   GEMV (rows 1..8, more in passes): gemv.cuh's body, each 16-byte chunk of a weight row eight
//     values widened to f32 exactly.
//   GEMM and grouped GEMM: tile_bf16.cuh's N128×M64 tile, 3-stage cp.async ring; bf16 weights
//     go to the bf16 tensor cores as stored, f16 weights as two exact bf16 parts (F16W).
#include "gemv.cuh"
#include "tile_bf16.cuh"

#define METRALE_W16_VIEW(FMT) \
  metrale::QuantWeights<FMT> { reinterpret_cast<const unsigned*>(weight), nullptr, nullptr, n, k, 0 }

// PREFIX_gemv, PREFIX_gemm, PREFIX_grouped_gemm for weights of element type ELEM read as FMT.
#define METRALE_W16_KERNELS(PREFIX, ELEM, FMT)                                                                      \
  /* Decode, rows 1..8 (more in passes): grid (ceil(n/64), 1), block 128 (any multiple of 32 up to 256). */       \
  extern "C" __global__ void __launch_bounds__(256)                                                                \
      PREFIX##_gemv(const __nv_bfloat16* x, const ELEM* weight, __nv_bfloat16* y, unsigned m, unsigned n,          \
                    unsigned k) {                                                                                  \
    metrale::gemv_rows(METRALE_W16_VIEW(FMT), metrale::Bf16Dot<FMT>{x, k}, y, m);                                  \
  }                                                                                                                \
  /* Tile N128×M64 on tensor cores, 3-stage cp.async: grid (ceil(n/128), ceil(m/64)), block 128. */                \
  extern "C" __global__ void __launch_bounds__(128)                                                                \
      PREFIX##_gemm(const __nv_bfloat16* x, const ELEM* weight, __nv_bfloat16* y, unsigned m, unsigned n,          \
                    unsigned k) {                                                                                  \
    metrale::bf16_tile_gemm<FMT, 64, 128, 32, 3, 1, 4>(x, METRALE_W16_VIEW(FMT), y, m);                           \
  }                                                                                                                \
  /* Rows grouped by expert (offsets i32 [E+1]), stacked weights: grid (ceil(n/128), experts), block 128. */       \
  extern "C" __global__ void __launch_bounds__(128)                                                                \
      PREFIX##_grouped_gemm(const __nv_bfloat16* x, const ELEM* weight, const int* offsets, __nv_bfloat16* y,      \
                            unsigned n, unsigned k, unsigned experts) {                                            \
    metrale::bf16_tile_grouped<FMT, 64, 128, 32, 3, 1, 4>(x, METRALE_W16_VIEW(FMT), offsets, y, experts);         \
  }

METRALE_W16_KERNELS(bf16, __nv_bfloat16, metrale::Bf16W)
METRALE_W16_KERNELS(f16, __half, metrale::F16W)
