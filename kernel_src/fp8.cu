// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `fp8` (docs/kernels.md): weights in layout fp8-e4m3 (E4M3 bytes, f32 scales per row
// and group of 128): value e4m3(q) · s.
//   bf16 activations (sm_80): fp8_gemv, fp8_gemm, fp8_grouped_gemm (E4M3 decoded exactly to bf16
//     for the bf16 tensor cores) and fp8_grouped_gemv, the decode form over the active experts;
//   E4M3 activations (sm_89+, gated by the manifest): fp8_gemm_a8, fp8_grouped_gemm_a8 on the
//     E4M3 tensor cores, and their _group128 forms for activation scales per 128 columns
//     (quant/quantize_fp8_group128). Below sm_89 their bodies trap.
#include "gemv.cuh"
#include "tile_8bit.cuh"
#include "tile_bf16.cuh"

// Rows of K bytes start 16-byte aligned (K is a multiple of 128): read as words.
#define METRALE_FP8_VIEW \
  metrale::QuantWeights<metrale::Fp8W> { reinterpret_cast<const unsigned*>(weight), scales, nullptr, n, k, 128 }

// Decode, rows 1..8 (more in passes): grid (ceil(n/64), 1), block 128 (any multiple of 32 up to 256).
extern "C" __global__ void __launch_bounds__(256)
    fp8_gemv(const __nv_bfloat16* x, const unsigned char* weight, const float* scales, __nv_bfloat16* y, unsigned m,
             unsigned n, unsigned k) {
  metrale::gemv_rows(METRALE_FP8_VIEW, metrale::Bf16Dot<metrale::Fp8W>{x, k}, y, m);
}

// Tile N128×M64 on bf16 tensor cores, 3-stage cp.async: grid (ceil(n/128), ceil(m/64)), block 128.
extern "C" __global__ void __launch_bounds__(128)
    fp8_gemm(const __nv_bfloat16* x, const unsigned char* weight, const float* scales, __nv_bfloat16* y, unsigned m,
             unsigned n, unsigned k) {
  metrale::bf16_tile_gemm<metrale::Fp8W, 64, 128, 32, 3, 1, 4>(x, METRALE_FP8_VIEW, y, m);
}

// Rows grouped by expert (offsets i32 [E+1]): grid (ceil(n/128), experts), block 128.
extern "C" __global__ void __launch_bounds__(128)
    fp8_grouped_gemm(const __nv_bfloat16* x, const unsigned char* weight, const float* scales, const int* offsets,
                     __nv_bfloat16* y, unsigned n, unsigned k, unsigned experts) {
  metrale::bf16_tile_grouped<metrale::Fp8W, 64, 128, 32, 3, 1, 4>(x, METRALE_FP8_VIEW, offsets, y, experts);
}

// Block (bx, by): columns [64·bx, 64·bx + 64) of every row of expert active[1 + by] (rows as
// moe_align groups them), nothing when by >= active[0]. Grid (ceil(n/64), slots), block 128.
extern "C" __global__ void __launch_bounds__(256)
    fp8_grouped_gemv(const __nv_bfloat16* x, const unsigned char* weight, const float* scales, const int* offsets,
                     const int* active, __nv_bfloat16* y, unsigned n, unsigned k, unsigned slots) {
  const unsigned slot = blockIdx.y;
  if (slot >= slots || slot >= static_cast<unsigned>(active[0])) return;
  const unsigned expert = static_cast<unsigned>(active[1 + slot]);
  const int begin = offsets[expert];
  const int end = offsets[expert + 1];
  if (end <= begin) return;
  const metrale::QuantWeights<metrale::Fp8W> w = METRALE_FP8_VIEW.expert(expert);
  metrale::gemv_rows(w, metrale::Bf16Dot<metrale::Fp8W>{x + static_cast<size_t>(begin) * k, k},
                     y + static_cast<size_t>(begin) * n, static_cast<unsigned>(end - begin));
}

// E4M3 activations (quant/quantize_fp8): y = xscale[r] · Σ_g s · Σ e4m3·e4m3.
// Grid (ceil(n/128), ceil(m/64)), block 128.
extern "C" __global__ void __launch_bounds__(128)
    fp8_gemm_a8(const unsigned char* xq, const float* xscale, const unsigned char* weight, const float* scales,
                __nv_bfloat16* y, unsigned m, unsigned n, unsigned k) {
  metrale::tile8_gemm<metrale::Fp8W>(xq, xscale, METRALE_FP8_VIEW, y, m);
}

// Grid (ceil(n/128), experts), block 128.
extern "C" __global__ void __launch_bounds__(128)
    fp8_grouped_gemm_a8(const unsigned char* xq, const float* xscale, const unsigned char* weight, const float* scales,
                        const int* offsets, __nv_bfloat16* y, unsigned n, unsigned k, unsigned experts) {
  metrale::tile8_grouped<metrale::Fp8W>(xq, xscale, METRALE_FP8_VIEW, offsets, y, experts);
}

// Activation scales per 128 columns (xscale f32 [m][k/128], quant/quantize_fp8_group128):
// y = Σ_g xscale[r][g] · s · Σ e4m3·e4m3. Grid (ceil(n/128), ceil(m/64)), block 128.
extern "C" __global__ void __launch_bounds__(128)
    fp8_gemm_a8_group128(const unsigned char* xq, const float* xscale, const unsigned char* weight, const float* scales,
                         __nv_bfloat16* y, unsigned m, unsigned n, unsigned k) {
  metrale::tile8_gemm<metrale::Fp8W, true>(xq, xscale, METRALE_FP8_VIEW, y, m);
}

// Grid (ceil(n/128), experts), block 128.
extern "C" __global__ void __launch_bounds__(128)
    fp8_grouped_gemm_a8_group128(const unsigned char* xq, const float* xscale, const unsigned char* weight,
                                 const float* scales, const int* offsets, __nv_bfloat16* y, unsigned n, unsigned k,
                                 unsigned experts) {
  metrale::tile8_grouped<metrale::Fp8W, true>(xq, xscale, METRALE_FP8_VIEW, offsets, y, experts);
}
