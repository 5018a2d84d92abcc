// SPDX-License-Identifier: MIT OR Apache-2.0
// Tile GEMM on tensor cores for bf16 activations and quantized weights (any format of
// quant_formats.cuh): y[M][N] = x[M][K] · W[N][K]ᵀ, one BM×BN output tile per block, K walked in
// BK chunks through shared memory (tile_pipeline.cuh).
//
// Tensor cores: mma.sync m16n8k16 bf16 -> f32 (sm_80+). A is x as stored (bf16). B is the code's
// value without its scale — q - z, or the E4M3 number — which bf16 holds exactly; each group's
// partial sums go to `part` and are scaled in f32 when the group of K completes
// (`acc += part * scale`), so nothing is rounded that the scalar definition does not round.
// Plain 16-bit weights have no scales: bf16 values enter as stored, straight into `acc`; an f16
// value enters as two bf16 parts whose sum it is (two mmas), every product still exact.
//
// Fragment order: an mma sums over its 16 K positions in any order, so each thread takes the
// four contiguous K positions 4t..4t+3 of its row / column as the fragment elements 2t, 2t+1,
// 2t+8, 2t+9 (the same permutation on A and B): one 8-byte load of A per row, one 16-bit (4-bit
// codes), 32-bit (8-bit codes) or 64-bit (16-bit values) load of B per column.
#pragma once

#include "quant_formats.cuh"
#include "tile_pipeline.cuh"

namespace metrale {

// Shared-memory tile of one stage. A rows are padded by 16 bf16 (8 words: the 8-byte fragment
// loads of a half-warp's four row groups hit distinct banks), B rows of 8 words or more by 4
// words; rows stay 16-byte aligned for cp.async and bulk copies.
template <unsigned BM, unsigned BN, unsigned BK, unsigned BITS>
struct TileStage {
  static constexpr unsigned kAStride = BK + 16;  // bf16 per A row
  static constexpr unsigned kBWords = BK * BITS / 32;
  static constexpr unsigned kBStride = kBWords + (kBWords >= 8 ? 4 : 0);  // words per B row
  alignas(16) __nv_bfloat16 a[BM * kAStride];
  alignas(16) unsigned b[BN * kBStride];
};

// A pair of 16-bit values (Fmt::value) as bf16 pairs hi + lo, exactly (see F16W). An infinite
// value keeps lo = 0, so its products stay infinite rather than inf + NaN.
template <class Fmt>
__device__ __forceinline__ void bf16_parts(unsigned pair, unsigned& hi, unsigned& lo) {
  const float v0 = Fmt::value(pair & 0xffffu), v1 = Fmt::value(pair >> 16);
  hi = bf16_pair(v0, v1);
  const float r0 = v0 - bf16_lo(hi), r1 = v1 - bf16_hi(hi);
  lo = bf16_pair(r0 == r0 ? r0 : 0.f, r1 == r1 ? r1 : 0.f);
}

// The per-thread accumulators and the math of one warp on one stage.
template <class Fmt, unsigned BM, unsigned BN, unsigned BK, unsigned WARPS_M, unsigned WARPS_N>
struct TileMath {
  using Shape = TileShape<BM, BN, WARPS_M, WARPS_N>;
  using Stage = TileStage<BM, BN, BK, Fmt::kBits>;
  static_assert(BK % 16 == 0, "whole mma K steps; groups (>= 32) flush between steps");
  float acc[Shape::kMTiles][Shape::kNTiles][4];
  float part[Shape::kMTiles][Shape::kNTiles][4];
  float zf[Shape::kNTiles];  // code_offset(zero point) of the B column each n-tile decodes

  __device__ void clear() {
#pragma unroll
    for (unsigned i = 0; i < Shape::kMTiles; ++i)
#pragma unroll
      for (unsigned j = 0; j < Shape::kNTiles; ++j)
#pragma unroll
        for (unsigned e = 0; e < 4; ++e) acc[i][j][e] = part[i][j][e] = 0.f;
#pragma unroll
    for (unsigned j = 0; j < Shape::kNTiles; ++j) zf[j] = code_offset(Fmt::kZero);
  }

  __device__ void load_zeros(const QuantWeights<Fmt>& w, unsigned n0, unsigned group, unsigned warp_n, unsigned lane) {
#pragma unroll
    for (unsigned j = 0; j < Shape::kNTiles; ++j) {
      const unsigned col = n0 + warp_n * Shape::kWarpN + j * 8 + (lane >> 2);
      zf[j] = code_offset(col < w.n ? w.zero(col, group) : 0);
    }
  }

  // B fragments of n-tile j for K step kk: four codes of column `col` decoded to two bf16 pairs
  // (per part: see Fmt::kBf16Parts).
  __device__ void b_fragment(const Stage& stage, unsigned col, unsigned kk, unsigned t, unsigned j,
                             unsigned (&b)[Fmt::kBf16Parts][2]) const {
    if constexpr (Fmt::kBits == 16) {
      const uint2 v = *reinterpret_cast<const uint2*>(stage.b + col * Stage::kBStride + kk / 2 + 2 * t);
      if constexpr (Fmt::kBf16Parts == 1) {
        b[0][0] = v.x;
        b[0][1] = v.y;
      } else {
        bf16_parts<Fmt>(v.x, b[0][0], b[1][0]);
        bf16_parts<Fmt>(v.y, b[0][1], b[1][1]);
      }
      return;
    }
    unsigned word;
    if constexpr (Fmt::kBits == 4) {
      word = stage.b[col * Stage::kBStride + kk / 8 + t / 2] >> (16 * (t & 1u));
    } else {
      word = stage.b[col * Stage::kBStride + kk / 4 + t];
    }
    b[0][0] = bf16_pair(code_value<Fmt>(code_at<Fmt>(word, 0), zf[j]), code_value<Fmt>(code_at<Fmt>(word, 1), zf[j]));
    b[0][1] = bf16_pair(code_value<Fmt>(code_at<Fmt>(word, 2), zf[j]), code_value<Fmt>(code_at<Fmt>(word, 3), zf[j]));
  }

  // part += A_chunk · B_chunkᵀ for this warp's sub-tile, flushing at every group boundary
  // (unscaled formats: acc += directly). `rows`: valid rows of the tile; m-tiles wholly past
  // them are skipped (warp-uniform).
  __device__ void compute(const Stage& stage, const QuantWeights<Fmt>& w, unsigned n0, unsigned k0, unsigned rows,
                          unsigned warp_m, unsigned warp_n, unsigned lane) {
    const unsigned g = lane >> 2;  // groupID
    const unsigned t = lane & 3u;  // threadID_in_group
#pragma unroll
    for (unsigned kk = 0; kk < BK; kk += 16) {
      if constexpr (Fmt::kZeros) {
        if (w.group_starts(k0 + kk)) load_zeros(w, n0, w.group_of(k0 + kk), warp_n, lane);
      }
      unsigned a[Shape::kMTiles][4];
#pragma unroll
      for (unsigned i = 0; i < Shape::kMTiles; ++i) {
        const unsigned row = warp_m * Shape::kWarpM + i * 16 + g;
        const uint2 lo = *reinterpret_cast<const uint2*>(stage.a + row * Stage::kAStride + kk + 4 * t);
        const uint2 hi = *reinterpret_cast<const uint2*>(stage.a + (row + 8) * Stage::kAStride + kk + 4 * t);
        a[i][0] = lo.x;  // row g,   K 4t, 4t+1 (elements 2t, 2t+1)
        a[i][1] = hi.x;  // row g+8
        a[i][2] = lo.y;  // row g,   K 4t+2, 4t+3 (elements 2t+8, 2t+9)
        a[i][3] = hi.y;  // row g+8
      }
#pragma unroll
      for (unsigned j = 0; j < Shape::kNTiles; ++j) {
        unsigned b[Fmt::kBf16Parts][2];
        b_fragment(stage, warp_n * Shape::kWarpN + j * 8 + g, kk, t, j, b);
#pragma unroll
        for (unsigned i = 0; i < Shape::kMTiles; ++i) {
          if (warp_m * Shape::kWarpM + i * 16 >= rows) continue;
#pragma unroll
          for (unsigned p = 0; p < Fmt::kBf16Parts; ++p) mma_bf16_16816(Fmt::kScaled ? part[i][j] : acc[i][j], a[i], b[p]);
        }
      }
      if constexpr (Fmt::kScaled) {
        if (w.group_starts(k0 + kk + 16)) flush(w, n0, w.group_of(k0 + kk), warp_n, lane);
      }
    }
  }

  // acc += part * scale for the finished group, then part = 0.
  __device__ void flush(const QuantWeights<Fmt>& w, unsigned n0, unsigned group, unsigned warp_n, unsigned lane) {
    const unsigned t = lane & 3u;
#pragma unroll
    for (unsigned j = 0; j < Shape::kNTiles; ++j) {
      const unsigned col = n0 + warp_n * Shape::kWarpN + j * 8 + 2 * t;
      const float s0 = col < w.n ? w.scale(col, group) : 0.f;
      const float s1 = col + 1 < w.n ? w.scale(col + 1, group) : 0.f;
#pragma unroll
      for (unsigned i = 0; i < Shape::kMTiles; ++i) {
        acc[i][j][0] = fmaf(part[i][j][0], s0, acc[i][j][0]);
        acc[i][j][1] = fmaf(part[i][j][1], s1, acc[i][j][1]);
        acc[i][j][2] = fmaf(part[i][j][2], s0, acc[i][j][2]);
        acc[i][j][3] = fmaf(part[i][j][3], s1, acc[i][j][3]);
        part[i][j][0] = part[i][j][1] = part[i][j][2] = part[i][j][3] = 0.f;
      }
    }
  }

  // c0,c1: row g, columns 2t, 2t+1; c2,c3: row g+8, same columns.
  __device__ void store(__nv_bfloat16* __restrict__ y, unsigned m, unsigned n, unsigned m0, unsigned n0,
                        unsigned warp_m, unsigned warp_n, unsigned lane) const {
    const unsigned g = lane >> 2;
    const unsigned t = lane & 3u;
#pragma unroll
    for (unsigned i = 0; i < Shape::kMTiles; ++i) {
#pragma unroll
      for (unsigned j = 0; j < Shape::kNTiles; ++j) {
        const unsigned row = m0 + warp_m * Shape::kWarpM + i * 16 + g;
        const unsigned col = n0 + warp_n * Shape::kWarpN + j * 8 + 2 * t;
#pragma unroll
        for (unsigned e = 0; e < 4; ++e) {
          const unsigned r = row + (e >= 2 ? 8 : 0);
          const unsigned c = col + (e & 1u);
          if (r < m && c < n) y[static_cast<size_t>(r) * n + c] = to_bf16(acc[i][j][e]);
        }
      }
    }
  }
};

// One output tile at (m0, n0) of y = x · Wᵀ (x: m rows of w.k; y: m rows of w.n).
template <class Fmt, unsigned BM, unsigned BN, unsigned BK, unsigned STAGES, unsigned WARPS_M, unsigned WARPS_N>
struct Bf16Tile {
  using Shape = TileShape<BM, BN, WARPS_M, WARPS_N>;
  using Stage = TileStage<BM, BN, BK, Fmt::kBits>;
  const __nv_bfloat16* x;
  const QuantWeights<Fmt>& w;
  unsigned m, m0, n0;
  Stage* stages;
  unsigned warp_m, warp_n, lane;
  TileMath<Fmt, BM, BN, BK, WARPS_M, WARPS_N> math;

  template <bool ASYNC>
  __device__ void load(unsigned s, unsigned c) {
    const unsigned words = w.row_words();
    load_rows<BM, BK * 2, Stage::kAStride * 2, Shape::kThreads, ASYNC>(
        stages[s].a, x + static_cast<size_t>(m0) * w.k + c * BK, static_cast<size_t>(w.k) * 2, m - m0);
    load_rows<BN, BK * Fmt::kBits / 8, Stage::kBStride * 4, Shape::kThreads, ASYNC>(
        stages[s].b, w.codes + static_cast<size_t>(n0) * words + c * Stage::kBWords, static_cast<size_t>(words) * 4,
        w.n - n0);
  }
  __device__ void compute(unsigned s, unsigned c) {
    math.compute(stages[s], w, n0, c * BK, m - m0, warp_m, warp_n, lane);
  }
};

template <class Fmt, unsigned BM, unsigned BN, unsigned BK, unsigned STAGES, unsigned WARPS_M, unsigned WARPS_N>
__device__ void bf16_tile(const __nv_bfloat16* __restrict__ x, const QuantWeights<Fmt>& w,
                          __nv_bfloat16* __restrict__ y, unsigned m, unsigned m0, unsigned n0,
                          TileStage<BM, BN, BK, Fmt::kBits>* stages) {
  const unsigned warp = threadIdx.x >> 5;
  Bf16Tile<Fmt, BM, BN, BK, STAGES, WARPS_M, WARPS_N> tile{x, w, m, m0, n0, stages, warp / WARPS_N, warp % WARPS_N,
                                                           threadIdx.x & 31u, {}};
  tile.math.clear();
  run_pipeline<STAGES>(w.k / BK, tile);
  tile.math.store(y, m, w.n, m0, n0, tile.warp_m, tile.warp_n, tile.lane);
}

// Dense: grid (ceil(n/BN), ceil(m/BM)).
template <class Fmt, unsigned BM, unsigned BN, unsigned BK, unsigned STAGES, unsigned WARPS_M, unsigned WARPS_N>
__device__ void bf16_tile_gemm(const __nv_bfloat16* __restrict__ x, const QuantWeights<Fmt>& w,
                               __nv_bfloat16* __restrict__ y, unsigned m) {
  using Stage = TileStage<BM, BN, BK, Fmt::kBits>;
  static_assert(STAGES * sizeof(Stage) <= 48 * 1024, "static shared memory limit");
  require_block<TileShape<BM, BN, WARPS_M, WARPS_N>::kThreads>();
  __shared__ Stage stages[STAGES];
  const unsigned n0 = blockIdx.x * BN;
  const unsigned m0 = blockIdx.y * BM;
  if (n0 >= w.n || m0 >= m) return;  // uniform per block
  bf16_tile<Fmt, BM, BN, BK, STAGES, WARPS_M, WARPS_N>(x, w, y, m, m0, n0, stages);
}

// Grouped by expert: grid (ceil(n/BN), experts); expert e owns rows [offsets[e], offsets[e+1])
// of x and y and matrix e of the stack, read once per BM of its rows.
template <class Fmt, unsigned BM, unsigned BN, unsigned BK, unsigned STAGES, unsigned WARPS_M, unsigned WARPS_N>
__device__ void bf16_tile_grouped(const __nv_bfloat16* __restrict__ x, const QuantWeights<Fmt>& stack,
                                  const int* __restrict__ offsets, __nv_bfloat16* __restrict__ y, unsigned experts) {
  using Stage = TileStage<BM, BN, BK, Fmt::kBits>;
  static_assert(STAGES * sizeof(Stage) <= 48 * 1024, "static shared memory limit");
  require_block<TileShape<BM, BN, WARPS_M, WARPS_N>::kThreads>();
  __shared__ Stage stages[STAGES];
  const unsigned expert = blockIdx.y;
  const unsigned n0 = blockIdx.x * BN;
  if (expert >= experts || n0 >= stack.n) return;
  const int begin = offsets[expert];
  const int end = offsets[expert + 1];
  if (end <= begin) return;  // uniform: an expert without rows does nothing
  const unsigned rows = static_cast<unsigned>(end - begin);
  const QuantWeights<Fmt> w = stack.expert(expert);
  const __nv_bfloat16* xe = x + static_cast<size_t>(begin) * w.k;
  __nv_bfloat16* ye = y + static_cast<size_t>(begin) * w.n;
  for (unsigned m0 = 0; m0 < rows; m0 += BM) bf16_tile<Fmt, BM, BN, BK, STAGES, WARPS_M, WARPS_N>(xe, w, ye, rows, m0, n0, stages);
}

// The W4A16 family of docs/kernels.md (canonical layout, f16 scales, groups of 128).
template <unsigned BM, unsigned BN, unsigned BK, unsigned STAGES, unsigned WARPS_M, unsigned WARPS_N>
__device__ void w4a16_tile_gemm(const __nv_bfloat16* __restrict__ x, const unsigned* __restrict__ qweight,
                                const __half* __restrict__ scales, __nv_bfloat16* __restrict__ y, unsigned m,
                                unsigned n, unsigned k) {
  const QuantWeights<W4Sym> w{qweight, scales, nullptr, n, k, kGroup};
  bf16_tile_gemm<W4Sym, BM, BN, BK, STAGES, WARPS_M, WARPS_N>(x, w, y, m);
}

}  // namespace metrale
