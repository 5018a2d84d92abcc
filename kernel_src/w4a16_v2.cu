// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `w4a16_v2`: the N128×M128 tile (grid (ceil(n/128), ceil(m/128)), block 256), eight
// warps in 2×4, K chunks of 32 double-buffered with cp.async. Needs sm_80.
#include "tile_bf16.cuh"

extern "C" __global__ void __launch_bounds__(256)
    w4a16_gemm_t_m128_v2(const __nv_bfloat16* x, const unsigned* qweight, const __half* scales, __nv_bfloat16* y,
                         unsigned m, unsigned n, unsigned k) {
  metrale::w4a16_tile_gemm<128, 128, 32, 2, 2, 4>(x, qweight, scales, y, m, n, k);
}
