// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `w8a8` (docs/kernels.md): int8 activations with per-row scales (quant/quantize_int8),
// weights in layout w8-zp: y[r][c] = xscale[r] · Σ_g s · (Σ xq·q − z · Σ xq), inner sums exact in
// int32. Decode on CUDA cores (dp4a), tiles on the int8 tensor cores. Needs sm_80.
#include "gemv.cuh"
#include "tile_8bit.cuh"

#define METRALE_W8A8_ARGS \
  const unsigned char *xq, const float *xscale, const unsigned char *qweight, const float *scales, const unsigned char *zeros
// Rows of K bytes start 16-byte aligned (K is a multiple of 128): read as words.
#define METRALE_W8A8_VIEW \
  metrale::QuantWeights<metrale::W8Zp> { reinterpret_cast<const unsigned*>(qweight), scales, zeros, n, k, group }

// Decode, rows 1..8 (more in passes): grid (ceil(n/64), 1), block 128 (any multiple of 32 up to 256).
extern "C" __global__ void __launch_bounds__(256)
    w8a8_gemv(METRALE_W8A8_ARGS, __nv_bfloat16* y, unsigned m, unsigned n, unsigned k, unsigned group) {
  metrale::gemv_rows(METRALE_W8A8_VIEW, metrale::I8Dot<metrale::W8Zp>{xq, xscale, k}, y, m);
}

// Tile N128×M64, 4-stage cp.async: grid (ceil(n/128), ceil(m/64)), block 128.
extern "C" __global__ void __launch_bounds__(128)
    w8a8_gemm(METRALE_W8A8_ARGS, __nv_bfloat16* y, unsigned m, unsigned n, unsigned k, unsigned group) {
  metrale::tile8_gemm<metrale::W8Zp>(xq, xscale, METRALE_W8A8_VIEW, y, m);
}

// Rows grouped by expert (offsets i32 [E+1]): grid (ceil(n/128), experts), block 128.
extern "C" __global__ void __launch_bounds__(128)
    w8a8_grouped_gemm(METRALE_W8A8_ARGS, const int* offsets, __nv_bfloat16* y, unsigned n, unsigned k, unsigned group,
                      unsigned experts) {
  metrale::tile8_grouped<metrale::W8Zp>(xq, xscale, METRALE_W8A8_VIEW, offsets, y, experts);
}
