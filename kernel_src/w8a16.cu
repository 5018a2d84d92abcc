// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `w8a16` (docs/kernels.md): bf16 activations, weights in layout w8-zp (u8 codes, f32
// scales and u8 zero points per group of 32, 64 or 128): value (q - z) · s. Needs sm_80.
#include "gemv.cuh"
#include "tile_bf16.cuh"

#define METRALE_W8ZP_WEIGHTS const unsigned char *qweight, const float *scales, const unsigned char *zeros
// Rows of K bytes start 16-byte aligned (K is a multiple of 128): read as words.
#define METRALE_W8ZP_VIEW \
  metrale::QuantWeights<metrale::W8Zp> { reinterpret_cast<const unsigned*>(qweight), scales, zeros, n, k, group }

// Decode, rows 1..8 (more in passes): grid (ceil(n/64), 1), block 128 (any multiple of 32 up to 256).
extern "C" __global__ void __launch_bounds__(256)
    w8a16_gemv(const __nv_bfloat16* x, METRALE_W8ZP_WEIGHTS, __nv_bfloat16* y, unsigned m, unsigned n, unsigned k,
               unsigned group) {
  metrale::gemv_rows(METRALE_W8ZP_VIEW, metrale::Bf16Dot<metrale::W8Zp>{x, k}, y, m);
}

// Tile N128×M64 on tensor cores, 3-stage cp.async: grid (ceil(n/128), ceil(m/64)), block 128.
extern "C" __global__ void __launch_bounds__(128)
    w8a16_gemm(const __nv_bfloat16* x, METRALE_W8ZP_WEIGHTS, __nv_bfloat16* y, unsigned m, unsigned n, unsigned k,
               unsigned group) {
  metrale::bf16_tile_gemm<metrale::W8Zp, 64, 128, 32, 3, 1, 4>(x, METRALE_W8ZP_VIEW, y, m);
}

// Rows grouped by expert (offsets i32 [E+1]), stacked weights: grid (ceil(n/128), experts), block 128.
extern "C" __global__ void __launch_bounds__(128)
    w8a16_grouped_gemm(const __nv_bfloat16* x, METRALE_W8ZP_WEIGHTS, const int* offsets, __nv_bfloat16* y, unsigned n,
                       unsigned k, unsigned group, unsigned experts) {
  metrale::bf16_tile_grouped<metrale::W8Zp, 64, 128, 32, 3, 1, 4>(x, METRALE_W8ZP_VIEW, offsets, y, experts);
}
