// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `w4a16` (docs/kernels.md): the W4A16 GEMM family, one signature
// (x, qweight, scales, y, m, n, k) computing y = x · Wᵀ. Needs sm_80 (bf16 mma.sync, cp.async).
#include "gemv.cuh"
#include "tile_bf16.cuh"

#define METRALE_W4A16_ARGS                                                                      \
  const __nv_bfloat16 *x, const unsigned *qweight, const __half *scales, __nv_bfloat16 *y, unsigned m, \
      unsigned n, unsigned k

namespace {

template <unsigned MB>
__device__ __forceinline__ void w4a16_gemv_tier(METRALE_W4A16_ARGS) {
  const metrale::QuantWeights<metrale::W4Sym> w{qweight, scales, nullptr, n, k, metrale::kGroup};
  metrale::gemv_body<MB>(w, metrale::Bf16Dot<metrale::W4Sym>{x, k}, y, m);
}

}  // namespace

// Decode: one row, N64 per block (grid ceil(n/64), block 128; any multiple of 32 up to 256).
extern "C" __global__ void __launch_bounds__(256) w4a16_gemv(METRALE_W4A16_ARGS) {
  w4a16_gemv_tier<1>(x, qweight, scales, y, m, n, k);
}

// Batched decode: up to 8 rows read each weight once (grid ceil(n/64), block 128).
extern "C" __global__ void __launch_bounds__(256) w4a16_gemv_b8(METRALE_W4A16_ARGS) {
  w4a16_gemv_tier<8>(x, qweight, scales, y, m, n, k);
}

// Tile N128×M64, K in chunks of 32, loads then math (grid (ceil(n/128), ceil(m/64)), block 128).
extern "C" __global__ void __launch_bounds__(128) w4a16_gemm_t(METRALE_W4A16_ARGS) {
  metrale::w4a16_tile_gemm<64, 128, 32, 1, 1, 4>(x, qweight, scales, y, m, n, k);
}

// Same tile, 3-stage cp.async pipeline: two chunks in flight while one is computed.
extern "C" __global__ void __launch_bounds__(128) w4a16_gemm_t_p3(METRALE_W4A16_ARGS) {
  metrale::w4a16_tile_gemm<64, 128, 32, 3, 1, 4>(x, qweight, scales, y, m, n, k);
}

// Deep K: chunks of 64, half the chunk loop trips and barriers for large K.
extern "C" __global__ void __launch_bounds__(128) w4a16_gemm_t_k64(METRALE_W4A16_ARGS) {
  metrale::w4a16_tile_gemm<64, 128, 64, 1, 1, 4>(x, qweight, scales, y, m, n, k);
}

extern "C" __global__ void __launch_bounds__(128) w4a16_gemm_t_k64_p3(METRALE_W4A16_ARGS) {
  metrale::w4a16_tile_gemm<64, 128, 64, 3, 1, 4>(x, qweight, scales, y, m, n, k);
}

// N64×M64 twin: twice the blocks of the N128 tile, for shapes whose grid would be too small.
extern "C" __global__ void __launch_bounds__(128) w4a16_gemm_t_k64_n64_p3(METRALE_W4A16_ARGS) {
  metrale::w4a16_tile_gemm<64, 64, 64, 3, 2, 2>(x, qweight, scales, y, m, n, k);
}
