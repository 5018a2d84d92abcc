// SPDX-License-Identifier: MIT OR Apache-2.0
// W4A16 GEMV tiers: y[M][N] = x[M][K] · W[N][K]ᵀ for a few rows. A block covers 64 outputs
// (grid ceil(n/64)), four 16-row groups of one warp each (block 128; other multiples of 32 loop
// over the groups). Within a warp two lanes share an output row and take alternate 16-byte
// chunks of its codes (32 K positions, one scale), so every load of a warp reads 32 bytes of
// each of 16 rows and the lanes of a half read the same activations (broadcast).
#pragma once

#include "metrale_common.cuh"

namespace metrale {

constexpr unsigned kGemvRowsPerBlock = 64;
constexpr unsigned kGemvRowsPerWarp = 16;
constexpr unsigned kGemvUnroll = 16;  // 16-byte weight loads in flight per lane: 32 KiB per block

// MB: activation rows handled per pass (1 for the single-row tier, 8 for the batched one);
// larger m runs several passes so any m is correct.
template <unsigned MB>
__device__ void w4a16_gemv_body(const __nv_bfloat16* __restrict__ x, const unsigned* __restrict__ qweight,
                                const __half* __restrict__ scales, __nv_bfloat16* __restrict__ y, unsigned m,
                                unsigned n, unsigned k) {
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warps = blockDim.x >> 5;
  const unsigned chunks = k / 32;  // 16-byte chunks of codes per row
  const unsigned groups = k / kGroup;
  for (unsigned rg = threadIdx.x >> 5; rg < kGemvRowsPerBlock / kGemvRowsPerWarp && warps > 0; rg += warps) {
    const unsigned row = blockIdx.x * kGemvRowsPerBlock + rg * kGemvRowsPerWarp + (lane >> 1);
    const bool active = row < n;
    const unsigned half = lane & 1u;
    const uint4* wrow = reinterpret_cast<const uint4*>(qweight + static_cast<size_t>(active ? row : 0) * (k / 8));
    const __half* srow = scales + static_cast<size_t>(active ? row : 0) * groups;
    for (unsigned m0 = 0; m0 < m; m0 += MB) {
      float acc[MB];
#pragma unroll
      for (unsigned r = 0; r < MB; ++r) acc[r] = 0.f;
      for (unsigned c0 = half; c0 < chunks; c0 += 2 * kGemvUnroll) {
        uint4 w[kGemvUnroll];
        float s[kGemvUnroll];
#pragma unroll
        for (unsigned u = 0; u < kGemvUnroll; ++u) {
          const unsigned c = c0 + 2 * u;
          const bool in = active && c < chunks;
          w[u] = in ? __ldg(wrow + c) : make_uint4(0x88888888u, 0x88888888u, 0x88888888u, 0x88888888u);
          s[u] = in ? __half2float(srow[c / 4]) : 0.f;
        }
#pragma unroll
        for (unsigned u = 0; u < kGemvUnroll; ++u) {
          const unsigned c = c0 + 2 * u;
          if (c >= chunks) break;
#pragma unroll
          for (unsigned r = 0; r < MB; ++r) {
            if (m0 + r >= m) break;
            const uint4* xr = reinterpret_cast<const uint4*>(x + static_cast<size_t>(m0 + r) * k) + c * 4;
            const float part = dot8(__ldg(xr + 0), w[u].x) + dot8(__ldg(xr + 1), w[u].y) +
                               dot8(__ldg(xr + 2), w[u].z) + dot8(__ldg(xr + 3), w[u].w);
            acc[r] = fmaf(part, s[u], acc[r]);
          }
        }
      }
#pragma unroll
      for (unsigned r = 0; r < MB; ++r) {
        const float total = acc[r] + __shfl_xor_sync(0xffffffffu, acc[r], 1);
        if (active && half == 0 && m0 + r < m) y[static_cast<size_t>(m0 + r) * n + row] = to_bf16(total);
      }
    }
  }
}

}  // namespace metrale
