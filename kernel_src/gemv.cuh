// SPDX-License-Identifier: MIT OR Apache-2.0
// Decode GEMV for every quantized weight format: y[M][N] = x[M][K] · W[N][K]ᵀ for a few rows. A
// block covers 64 outputs (grid ceil(n/64)), four 16-row groups of one warp each (block 128;
// other multiples of 32 loop over the groups). Within a warp two lanes share an output row and
// take alternate 16-byte chunks of its codes (32 K positions of 4-bit codes, 16 of 8-bit ones;
// a chunk never spans two groups), so every load of a warp reads 32 bytes of each of 16 rows and
// the lanes of a half read the same activations (broadcast). Each lane keeps 16 loads in flight.
//
// The activations enter through a Dot policy, which decodes each chunk once for all rows:
// Bf16Dot (bf16 x, values (q - z) or e4m3(q), exact in f32) and I8Dot (int8 x: exact int32 dot
// products with dp4a, zero points subtracted through the chunk's activation sum, f32 from there
// on, xscale applied at the end).
#pragma once

#include "metrale_ptx.cuh"
#include "quant_formats.cuh"

namespace metrale {

constexpr unsigned kGemvRowsPerBlock = 64;
constexpr unsigned kGemvRowsPerWarp = 16;
constexpr unsigned kGemvUnroll = 16;  // 16-byte weight loads in flight per lane: 32 KiB per block

// A 16-byte chunk of codes decoded once, then dotted with each activation row.
template <class Fmt>
struct Bf16Dot {
  static constexpr unsigned kValues = 128 / Fmt::kBits;  // K positions per chunk
  struct Chunk {
    float v[kValues];  // exact values without the scale
  };
  const __nv_bfloat16* x;
  unsigned k;

  __device__ Chunk decode(const uint4& w, int z) const {
    const float zf = code_offset(z);
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
    Chunk chunk;
#pragma unroll
    for (unsigned i = 0; i < kValues; ++i) {
      chunk.v[i] = code_value<Fmt>(code_at<Fmt>(words[i / (32 / Fmt::kBits)], i % (32 / Fmt::kBits)), zf);
    }
    return chunk;
  }
  // Σ x[r][j] · value over the K positions of chunk c (not yet scaled).
  __device__ float operator()(unsigned r, unsigned c, const Chunk& chunk) const {
    const uint4* xr = reinterpret_cast<const uint4*>(x + static_cast<size_t>(r) * k) + c * (kValues / 8);
    float sum = 0.f;
#pragma unroll
    for (unsigned q = 0; q < kValues / 8; ++q) {
      const uint4 xv = __ldg(xr + q);
      const unsigned xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) {
        sum = fmaf(bf16_lo(xs[i]), chunk.v[8 * q + 2 * i], sum);
        sum = fmaf(bf16_hi(xs[i]), chunk.v[8 * q + 2 * i + 1], sum);
      }
    }
    return sum;
  }
  __device__ float finish(unsigned, float total) const { return total; }
};

// Eight 4-bit codes (one word, lowest nibble first) as two words of bytes in the same order.
__device__ __forceinline__ void spread_nibbles(unsigned w, unsigned& lo4, unsigned& hi4) {
  const unsigned even = w & 0x0f0f0f0fu;        // codes 0, 2, 4, 6
  const unsigned odd = (w >> 4) & 0x0f0f0f0fu;  // codes 1, 3, 5, 7
  lo4 = __byte_perm(even, odd, 0x5140u);        // codes 0..3
  hi4 = __byte_perm(even, odd, 0x7362u);        // codes 4..7
}

template <class Fmt>
struct I8Dot {
  static constexpr unsigned kWords = 32 / Fmt::kBits;  // words of byte codes per chunk
  struct Chunk {
    unsigned q[kWords];  // codes as unsigned bytes, in K order
    int z;
  };
  const unsigned char* xq;
  const float* xscale;
  unsigned k;

  __device__ Chunk decode(const uint4& w, int z) const {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
    Chunk chunk;
    chunk.z = z;
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) {
      if constexpr (Fmt::kBits == 8) {
        chunk.q[i] = words[i];
      } else {
        spread_nibbles(words[i], chunk.q[2 * i], chunk.q[2 * i + 1]);
      }
    }
    return chunk;
  }
  // Σ xq·(q - z) over chunk c, exact in int32, then as f32 (|value| < 2^24).
  __device__ float operator()(unsigned r, unsigned c, const Chunk& chunk) const {
    const uint4* xr = reinterpret_cast<const uint4*>(xq + static_cast<size_t>(r) * k) + c * (kWords / 4);
    int dot = 0;
    int sum = 0;
#pragma unroll
    for (unsigned q = 0; q < kWords / 4; ++q) {
      const uint4 xv = __ldg(xr + q);
      const unsigned xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) {
        dot = dp4a_su(xs[i], chunk.q[4 * q + i], dot);
        sum = dp4a_su(xs[i], 0x01010101u, sum);
      }
    }
    return static_cast<float>(dot - chunk.z * sum);
  }
  __device__ float finish(unsigned r, float total) const { return xscale[r] * total; }
};

// MB: activation rows handled per pass (1 for the single-row tier, 8 for the batched one);
// larger m runs several passes so any m is correct.
template <unsigned MB, class Fmt, class Dot>
__device__ void gemv_body(const QuantWeights<Fmt>& w, const Dot& dot, __nv_bfloat16* __restrict__ y, unsigned m) {
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warps = blockDim.x >> 5;
  const unsigned chunk_k = 128 / Fmt::kBits;  // K positions per 16-byte chunk
  const unsigned chunks = w.k / chunk_k;
  for (unsigned rg = threadIdx.x >> 5; rg < kGemvRowsPerBlock / kGemvRowsPerWarp && warps > 0; rg += warps) {
    const unsigned row = blockIdx.x * kGemvRowsPerBlock + rg * kGemvRowsPerWarp + (lane >> 1);
    const bool active = row < w.n;
    const unsigned half = lane & 1u;
    const uint4* wrow = reinterpret_cast<const uint4*>(w.row_codes(active ? row : 0));
    for (unsigned m0 = 0; m0 < m; m0 += MB) {
      float acc[MB];
#pragma unroll
      for (unsigned r = 0; r < MB; ++r) acc[r] = 0.f;
      for (unsigned c0 = half; c0 < chunks; c0 += 2 * kGemvUnroll) {
        uint4 wv[kGemvUnroll];
        float s[kGemvUnroll];
        int z[kGemvUnroll];
#pragma unroll
        for (unsigned u = 0; u < kGemvUnroll; ++u) {
          const unsigned c = c0 + 2 * u;
          const bool in = active && c < chunks;
          const unsigned g = w.group_of(c * chunk_k);
          wv[u] = in ? __ldg(wrow + c) : make_uint4(0, 0, 0, 0);
          s[u] = in ? w.scale(row, g) : 0.f;
          z[u] = in ? w.zero(row, g) : Fmt::kZero;
        }
#pragma unroll
        for (unsigned u = 0; u < kGemvUnroll; ++u) {
          const unsigned c = c0 + 2 * u;
          if (c >= chunks) break;
          const typename Dot::Chunk chunk = dot.decode(wv[u], z[u]);
#pragma unroll
          for (unsigned r = 0; r < MB; ++r) {
            if (m0 + r >= m) break;
            acc[r] = fmaf(dot(m0 + r, c, chunk), s[u], acc[r]);
          }
        }
      }
#pragma unroll
      for (unsigned r = 0; r < MB; ++r) {
        const float total = acc[r] + __shfl_xor_sync(0xffffffffu, acc[r], 1);
        if (active && half == 0 && m0 + r < m) {
          y[static_cast<size_t>(m0 + r) * w.n + row] = to_bf16(dot.finish(m0 + r, total));
        }
      }
    }
  }
}

// The decode tier of the quantized families (rows 1..8, more in passes): one row gets the
// single-row body, whose loop carries no row checks.
template <class Fmt, class Dot>
__device__ void gemv_rows(const QuantWeights<Fmt>& w, const Dot& dot, __nv_bfloat16* __restrict__ y, unsigned m) {
  if (m == 1) {
    gemv_body<1>(w, dot, y, m);
  } else {
    gemv_body<8>(w, dot, y, m);
  }
}

}  // namespace metrale
