// SPDX-License-Identifier: MIT OR Apache-2.0
// Tile GEMM on tensor cores for 8-bit activations: int8 activations with integer weight codes
// (modules w4a8, w8a8: mma.sync m16n8k32 s8·u8 -> s32, sm_80+) and E4M3 activations with E4M3
// weights (fp8_*_a8) or 4-bit codes with zero points (w4afp8: each code 0..15 as the E4M3 number
// it equals), both on mma.sync m16n8k32 e4m3 -> f32, sm_89+. One N128×M64 tile per block, four
// warps side by side along N, K in chunks of 32 (one mma K step) through a 4-stage cp.async ring.
//
// Integer path: per group of K the block sums Σ xq·q exactly in int32 (`part`), and the row sums
// Σ xq with one more mma against a B of ones (`rsum`, in the accumulator layout); when the group
// completes, acc += s · f32(part - z · rsum), exact up to that product (|part - z·rsum| < 2^24
// for groups of at most 128). The result is y = xscale[row] · acc (docs/kernels.md).
// E4M3 path: part accumulates in f32 per group of 128, acc += part · s, y = xscale[row] · acc;
// with 4-bit codes the row sums are an E4M3 mma against ones too and acc += s · (part − z · rsum)
// in f32;
// with activation scales per 128 columns (GROUP_SCALES: xscale [m][k/128]) acc += part · s ·
// xscale[row][group] instead, and y = acc.
//
// Fragment order: each thread takes the eight contiguous K positions 8t..8t+7 of its row /
// column as the fragment elements 4t..4t+3 and 4t+16..4t+19 (the same permutation on A and B),
// one 8-byte load per row; 4-bit codes (one word) are spread to bytes in the same order.
#pragma once

#include "gemv.cuh"
#include "tile_pipeline.cuh"

namespace metrale {

// Four bytes holding integers 0..15 as the four E4M3 codes of the same numbers: 0..7 looked up
// (0, 1, 2, 3 -> 0x00, 0x38, 0x40, 0x44; 4..7 -> 0x48 + 2 (q - 4)), 8..15 are 0x48 + q.
__device__ __forceinline__ unsigned small_ints_to_e4m3(unsigned v) {
  const unsigned low3 = v & 0x07070707u;
  const unsigned pairs = low3 | (low3 >> 4);                       // selectors of bytes 0, 1 | 2, 3
  const unsigned small = __byte_perm(0x44403800u, 0x4e4c4a48u, (pairs & 0xffu) | ((pairs >> 8) & 0xff00u));
  const unsigned big = ((v >> 3) & 0x01010101u) * 0xffu;           // bytes whose integer is 8..15
  return (small & ~big) | ((v + 0x48484848u) & big);
}

// A and B rows of 32 K positions: 8-byte loads of a half-warp's four row groups (rows 32 bytes
// apart) and 4-byte loads of eight columns (16 bytes apart) hit distinct banks unpadded.
template <unsigned BM, unsigned BN, unsigned BITS>
struct Stage8 {
  static constexpr unsigned kBK = 32;
  static constexpr unsigned kAStride = kBK;              // bytes per A row
  static constexpr unsigned kBStride = kBK * BITS / 8;   // bytes per B row
  alignas(16) unsigned char a[BM * kAStride];
  alignas(16) unsigned char b[BN * kBStride];
};

template <class Fmt, unsigned BM, unsigned BN, unsigned WARPS_M, unsigned WARPS_N, bool GROUP_SCALES = false>
struct Math8 {
  using Shape = TileShape<BM, BN, WARPS_M, WARPS_N>;
  using Stage = Stage8<BM, BN, Fmt::kBits>;
  using Part = typename Select<Fmt::kE4m3Mma, float, int>::type;
  static constexpr bool kRowSums = !Fmt::kFp8;  // integer codes: the zero points need Σ xq
  float acc[Shape::kMTiles][Shape::kNTiles][4];
  Part part[Shape::kMTiles][Shape::kNTiles][4];
  Part rsum[Shape::kMTiles][4];  // Σ xq of rows g (elements 0, 1) and g+8 (2, 3); integer codes
  // GROUP_SCALES: the tile's rows of xscale ([rows][groups], row 0 the tile's first), and how many.
  const float* group_scales;
  unsigned groups, rows;

  __device__ void clear() {
#pragma unroll
    for (unsigned i = 0; i < Shape::kMTiles; ++i) {
#pragma unroll
      for (unsigned e = 0; e < 4; ++e) rsum[i][e] = 0;
#pragma unroll
      for (unsigned j = 0; j < Shape::kNTiles; ++j)
#pragma unroll
        for (unsigned e = 0; e < 4; ++e) {
          acc[i][j][e] = 0.f;
          part[i][j][e] = 0;
        }
    }
  }

  __device__ static void mma(Part (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    if constexpr (Fmt::kE4m3Mma) {
#if defined(METRALE_HAS_FP8)
      mma_e4m3_16832(d, a, b);
#else
      __trap();  // the manifest gates the E4M3 kernels to sm_89+
#endif
    } else {
      mma_s8u8_16832(d, a, b);
    }
  }

  // One K step of 32 (the whole chunk); flushes when it completes a group.
  __device__ void compute(const Stage& stage, const QuantWeights<Fmt>& w, unsigned n0, unsigned k0, unsigned rows,
                          unsigned warp_m, unsigned warp_n, unsigned lane) {
    const unsigned g = lane >> 2;
    const unsigned t = lane & 3u;
    unsigned a[Shape::kMTiles][4];
#pragma unroll
    for (unsigned i = 0; i < Shape::kMTiles; ++i) {
      const unsigned row = warp_m * Shape::kWarpM + i * 16 + g;
      const uint2 lo = *reinterpret_cast<const uint2*>(stage.a + row * Stage::kAStride + 8 * t);
      const uint2 hi = *reinterpret_cast<const uint2*>(stage.a + (row + 8) * Stage::kAStride + 8 * t);
      a[i][0] = lo.x;  // row g,   K 8t..8t+3   (elements 4t..4t+3)
      a[i][1] = hi.x;  // row g+8
      a[i][2] = lo.y;  // row g,   K 8t+4..8t+7 (elements 4t+16..4t+19)
      a[i][3] = hi.y;  // row g+8
      if constexpr (kRowSums) {
        constexpr unsigned kOne = Fmt::kE4m3Mma ? 0x38383838u : 0x01010101u;  // 1 in E4M3, or in u8
        const unsigned ones[2] = {kOne, kOne};
        if (warp_m * Shape::kWarpM + i * 16 < rows) mma(rsum[i], a[i], ones);
      }
    }
#pragma unroll
    for (unsigned j = 0; j < Shape::kNTiles; ++j) {
      const unsigned col = warp_n * Shape::kWarpN + j * 8 + g;
      unsigned b[2];
      if constexpr (Fmt::kBits == 8) {
        const uint2 v = *reinterpret_cast<const uint2*>(stage.b + col * Stage::kBStride + 8 * t);
        b[0] = v.x;
        b[1] = v.y;
      } else {
        spread_nibbles(*reinterpret_cast<const unsigned*>(stage.b + col * Stage::kBStride + 4 * t), b[0], b[1]);
        if constexpr (Fmt::kE4m3Mma) {
          b[0] = small_ints_to_e4m3(b[0]);
          b[1] = small_ints_to_e4m3(b[1]);
        }
      }
#pragma unroll
      for (unsigned i = 0; i < Shape::kMTiles; ++i) {
        if (warp_m * Shape::kWarpM + i * 16 < rows) mma(part[i][j], a[i], b);
      }
    }
    if (w.group_starts(k0 + Stage::kBK)) flush(w, n0, w.group_of(k0), warp_m, warp_n, lane);
  }

  __device__ void flush(const QuantWeights<Fmt>& w, unsigned n0, unsigned group, unsigned warp_m, unsigned warp_n,
                        unsigned lane) {
    const unsigned t = lane & 3u;
    float xs[Shape::kMTiles][2];  // rows g and g+8 of each M tile: their scale of this group (GROUP_SCALES)
#pragma unroll
    for (unsigned i = 0; i < Shape::kMTiles; ++i) {
      const unsigned row = warp_m * Shape::kWarpM + i * 16 + (lane >> 2);
      xs[i][0] = GROUP_SCALES && row < rows ? group_scales[static_cast<size_t>(row) * groups + group] : 1.f;
      xs[i][1] = GROUP_SCALES && row + 8 < rows ? group_scales[static_cast<size_t>(row + 8) * groups + group] : 1.f;
    }
#pragma unroll
    for (unsigned j = 0; j < Shape::kNTiles; ++j) {
      const unsigned col = n0 + warp_n * Shape::kWarpN + j * 8 + 2 * t;
      const float s[2] = {col < w.n ? w.scale(col, group) : 0.f, col + 1 < w.n ? w.scale(col + 1, group) : 0.f};
      const int z[2] = {col < w.n ? w.zero(col, group) : 0, col + 1 < w.n ? w.zero(col + 1, group) : 0};
#pragma unroll
      for (unsigned i = 0; i < Shape::kMTiles; ++i) {
#pragma unroll
        for (unsigned e = 0; e < 4; ++e) {
          if constexpr (Fmt::kFp8 && GROUP_SCALES) {
            acc[i][j][e] = fmaf(part[i][j][e], s[e & 1u] * xs[i][e >> 1], acc[i][j][e]);
          } else if constexpr (Fmt::kFp8) {
            acc[i][j][e] = fmaf(part[i][j][e], s[e & 1u], acc[i][j][e]);
          } else if constexpr (Fmt::kE4m3Mma) {
            acc[i][j][e] = fmaf(part[i][j][e] - static_cast<float>(z[e & 1u]) * rsum[i][e], s[e & 1u], acc[i][j][e]);
          } else {
            const int exact = part[i][j][e] - z[e & 1u] * rsum[i][e];
            acc[i][j][e] = fmaf(static_cast<float>(exact), s[e & 1u], acc[i][j][e]);
          }
          part[i][j][e] = 0;
        }
      }
    }
#pragma unroll
    for (unsigned i = 0; i < Shape::kMTiles; ++i)
#pragma unroll
      for (unsigned e = 0; e < 4; ++e) rsum[i][e] = 0;
  }

  __device__ void store(__nv_bfloat16* __restrict__ y, const float* __restrict__ xscale, unsigned m, unsigned n,
                        unsigned m0, unsigned n0, unsigned warp_m, unsigned warp_n, unsigned lane) const {
    const unsigned g = lane >> 2;
    const unsigned t = lane & 3u;
#pragma unroll
    for (unsigned i = 0; i < Shape::kMTiles; ++i) {
      const unsigned row = m0 + warp_m * Shape::kWarpM + i * 16 + g;
      const float xs[2] = {GROUP_SCALES ? 1.f : row < m ? xscale[row] : 0.f,
                           GROUP_SCALES ? 1.f : row + 8 < m ? xscale[row + 8] : 0.f};
#pragma unroll
      for (unsigned j = 0; j < Shape::kNTiles; ++j) {
        const unsigned col = n0 + warp_n * Shape::kWarpN + j * 8 + 2 * t;
#pragma unroll
        for (unsigned e = 0; e < 4; ++e) {
          const unsigned r = row + (e >= 2 ? 8 : 0);
          const unsigned c = col + (e & 1u);
          if (r < m && c < n) y[static_cast<size_t>(r) * n + c] = to_bf16(xs[e >> 1] * acc[i][j][e]);
        }
      }
    }
  }
};

constexpr unsigned kTile8M = 64;
constexpr unsigned kTile8N = 128;
constexpr unsigned kTile8Stages = 4;
constexpr unsigned kTile8WarpsM = 1;
constexpr unsigned kTile8WarpsN = 4;

// One output tile at (m0, n0) of y = xscale ⊙ (xq · Wᵀ) (xq: m rows of w.k bytes).
template <class Fmt, bool GROUP_SCALES>
struct Tile8 {
  using Shape = TileShape<kTile8M, kTile8N, kTile8WarpsM, kTile8WarpsN>;
  using Stage = Stage8<kTile8M, kTile8N, Fmt::kBits>;
  const unsigned char* xq;
  const QuantWeights<Fmt>& w;
  unsigned m, m0, n0;
  Stage* stages;
  unsigned warp_m, warp_n, lane;
  Math8<Fmt, kTile8M, kTile8N, kTile8WarpsM, kTile8WarpsN, GROUP_SCALES> math;

  template <bool ASYNC>
  __device__ void load(unsigned s, unsigned c) {
    const unsigned words = w.row_words();
    load_rows<kTile8M, Stage::kBK, Stage::kAStride, Shape::kThreads, ASYNC>(
        stages[s].a, xq + static_cast<size_t>(m0) * w.k + c * Stage::kBK, w.k, m - m0);
    load_rows<kTile8N, Stage::kBStride, Stage::kBStride, Shape::kThreads, ASYNC>(
        stages[s].b, w.codes + static_cast<size_t>(n0) * words + c * Stage::kBStride / 4,
        static_cast<size_t>(words) * 4, w.n - n0);
  }
  __device__ void compute(unsigned s, unsigned c) {
    math.compute(stages[s], w, n0, c * Stage::kBK, m - m0, warp_m, warp_n, lane);
  }
};

template <class Fmt, bool GROUP_SCALES>
__device__ void tile8(const unsigned char* __restrict__ xq, const float* __restrict__ xscale,
                      const QuantWeights<Fmt>& w, __nv_bfloat16* __restrict__ y, unsigned m, unsigned m0, unsigned n0,
                      Stage8<kTile8M, kTile8N, Fmt::kBits>* stages) {
  const unsigned warp = threadIdx.x >> 5;
  Tile8<Fmt, GROUP_SCALES> tile{xq, w, m, m0, n0, stages, warp / kTile8WarpsN, warp % kTile8WarpsN, threadIdx.x & 31u, {}};
  tile.math.clear();
  tile.math.groups = w.k / 128;
  tile.math.group_scales = xscale + static_cast<size_t>(m0) * tile.math.groups;
  tile.math.rows = m - m0;
  run_pipeline<kTile8Stages>(w.k / Stage8<kTile8M, kTile8N, Fmt::kBits>::kBK, tile);
  tile.math.store(y, xscale, m, w.n, m0, n0, tile.warp_m, tile.warp_n, tile.lane);
}

// Dense: grid (ceil(n/128), ceil(m/64)), block 128.
template <class Fmt, bool GROUP_SCALES = false>
__device__ void tile8_gemm(const unsigned char* __restrict__ xq, const float* __restrict__ xscale,
                           const QuantWeights<Fmt>& w, __nv_bfloat16* __restrict__ y, unsigned m) {
  using Stage = Stage8<kTile8M, kTile8N, Fmt::kBits>;
  require_block<TileShape<kTile8M, kTile8N, kTile8WarpsM, kTile8WarpsN>::kThreads>();
  __shared__ Stage stages[kTile8Stages];
  const unsigned n0 = blockIdx.x * kTile8N;
  const unsigned m0 = blockIdx.y * kTile8M;
  if (n0 >= w.n || m0 >= m) return;
  tile8<Fmt, GROUP_SCALES>(xq, xscale, w, y, m, m0, n0, stages);
}

// Grouped by expert: grid (ceil(n/128), experts), block 128 (rows as bf16_tile_grouped).
template <class Fmt, bool GROUP_SCALES = false>
__device__ void tile8_grouped(const unsigned char* __restrict__ xq, const float* __restrict__ xscale,
                              const QuantWeights<Fmt>& stack, const int* __restrict__ offsets,
                              __nv_bfloat16* __restrict__ y, unsigned experts) {
  using Stage = Stage8<kTile8M, kTile8N, Fmt::kBits>;
  require_block<TileShape<kTile8M, kTile8N, kTile8WarpsM, kTile8WarpsN>::kThreads>();
  __shared__ Stage stages[kTile8Stages];
  const unsigned expert = blockIdx.y;
  const unsigned n0 = blockIdx.x * kTile8N;
  if (expert >= experts || n0 >= stack.n) return;
  const int begin = offsets[expert];
  const int end = offsets[expert + 1];
  if (end <= begin) return;
  const unsigned rows = static_cast<unsigned>(end - begin);
  const QuantWeights<Fmt> w = stack.expert(expert);
  const unsigned char* xe = xq + static_cast<size_t>(begin) * w.k;
  __nv_bfloat16* ye = y + static_cast<size_t>(begin) * w.n;
  const float* xse = xscale + static_cast<size_t>(begin) * (GROUP_SCALES ? w.k / 128 : 1);
  for (unsigned m0 = 0; m0 < rows; m0 += kTile8M) tile8<Fmt, GROUP_SCALES>(xe, xse, w, ye, rows, m0, n0, stages);
}

}  // namespace metrale
