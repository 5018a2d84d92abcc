// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `w4a16_zp` (docs/kernels.md): bf16 activations, weights in layout w4-zp (4-bit codes,
// f32 scales and u8 zero points per group of 32, 64 or 128): value (q - z) · s. Needs sm_80.
#include "gemv.cuh"
#include "tile_bf16.cuh"

#define METRALE_W4ZP_WEIGHTS const unsigned *qweight, const float *scales, const unsigned char *zeros

// Decode, rows 1..8 (more in passes): grid (ceil(n/64), 1), block 128 (any multiple of 32 up to 256).
extern "C" __global__ void __launch_bounds__(256)
    w4a16_zp_gemv(const __nv_bfloat16* x, METRALE_W4ZP_WEIGHTS, __nv_bfloat16* y, unsigned m, unsigned n, unsigned k,
                  unsigned group) {
  const metrale::QuantWeights<metrale::W4Zp> w{qweight, scales, zeros, n, k, group};
  metrale::gemv_rows(w, metrale::Bf16Dot<metrale::W4Zp>{x, k}, y, m);
}

// Tile N128×M64 on tensor cores, 3-stage cp.async: grid (ceil(n/128), ceil(m/64)), block 128.
extern "C" __global__ void __launch_bounds__(128)
    w4a16_zp_gemm(const __nv_bfloat16* x, METRALE_W4ZP_WEIGHTS, __nv_bfloat16* y, unsigned m, unsigned n, unsigned k,
                  unsigned group) {
  const metrale::QuantWeights<metrale::W4Zp> w{qweight, scales, zeros, n, k, group};
  metrale::bf16_tile_gemm<metrale::W4Zp, 64, 128, 32, 3, 1, 4>(x, w, y, m);
}

// Rows grouped by expert (offsets i32 [E+1]), stacked weights: grid (ceil(n/128), experts), block 128.
extern "C" __global__ void __launch_bounds__(128)
    w4a16_zp_grouped_gemm(const __nv_bfloat16* x, METRALE_W4ZP_WEIGHTS, const int* offsets, __nv_bfloat16* y,
                          unsigned n, unsigned k, unsigned group, unsigned experts) {
  const metrale::QuantWeights<metrale::W4Zp> w{qweight, scales, zeros, n, k, group};
  metrale::bf16_tile_grouped<metrale::W4Zp, 64, 128, 32, 3, 1, 4>(x, w, offsets, y, experts);
}
