// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `w4afp8` (docs/kernels.md): E4M3 activations with per-row scales (quant/quantize_fp8*),
// weights in layout w4-zp: y[r][c] = xscale[r] · Σ_g s · (Σ e4m3(xq) · q − z · Σ e4m3(xq)), the
// codes 0..15 multiplied as the E4M3 numbers they are on the E4M3 tensor cores, f32 sums. Tiles
// only (a decode step runs the tile with its few rows). Needs sm_89; below it the bodies trap.
#include "tile_8bit.cuh"

#define METRALE_W4AFP8_ARGS const unsigned char *xq, const float *xscale, const unsigned *qweight, const float *scales, \
                            const unsigned char *zeros
#define METRALE_W4AFP8_VIEW metrale::QuantWeights<metrale::W4ZpE4m3> { qweight, scales, zeros, n, k, group }

// Tile N128×M64, 4-stage cp.async: grid (ceil(n/128), ceil(m/64)), block 128.
extern "C" __global__ void __launch_bounds__(128)
    w4afp8_gemm(METRALE_W4AFP8_ARGS, __nv_bfloat16* y, unsigned m, unsigned n, unsigned k, unsigned group) {
  metrale::tile8_gemm<metrale::W4ZpE4m3>(xq, xscale, METRALE_W4AFP8_VIEW, y, m);
}

// Rows grouped by expert (offsets i32 [E+1]): grid (ceil(n/128), experts), block 128.
extern "C" __global__ void __launch_bounds__(128)
    w4afp8_grouped_gemm(METRALE_W4AFP8_ARGS, const int* offsets, __nv_bfloat16* y, unsigned n, unsigned k, unsigned group,
                        unsigned experts) {
  metrale::tile8_grouped<metrale::W4ZpE4m3>(xq, xscale, METRALE_W4AFP8_VIEW, offsets, y, experts);
}
