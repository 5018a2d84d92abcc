// SPDX-License-Identifier: MIT OR Apache-2.0
// W4A16 tile GEMM on tensor cores: y[M][N] = x[M][K] · W[N][K]ᵀ, one BM×BN output tile per block
// (grid (ceil(n/BN), ceil(m/BM))), K walked in BK chunks through shared memory.
//
// Tensor cores: mma.sync m16n8k16 bf16 -> f32 (sm_80+). A is x as stored (bf16). B is the bare
// code minus 8, exact in bf16; the per-group scale is applied in f32 when a 128-wide group of K
// is complete, so nothing is rounded that the scalar definition does not round: each group's
// partial sums go to `part`, then `acc += part * scale`.
//
// Loading: STAGES == 1 loads each chunk with plain 16-byte loads, then computes; STAGES >= 2 is a
// cp.async pipeline that keeps STAGES - 1 chunks in flight while one is computed. Rows past m
// and n are zero-filled and never stored, so the edges need no special case in the math.
#pragma once

#include "metrale_common.cuh"
#include "metrale_ptx.cuh"

namespace metrale {

// Shared-memory tile of one stage. A rows are padded by 8 bf16 and B rows of 64 K by 4 words so
// the fragment loads of a warp hit distinct banks; rows stay 16-byte aligned for cp.async.
template <unsigned BM, unsigned BN, unsigned BK>
struct TileStage {
  static constexpr unsigned kAStride = BK + 8;                   // bf16 per A row
  static constexpr unsigned kBStride = BK / 8 + (BK >= 64 ? 4 : 0);  // words per B row
  alignas(16) __nv_bfloat16 a[BM * kAStride];
  alignas(16) unsigned b[BN * kBStride];
};

// Two codes (nibbles `shift` and `shift + 4` of w) as a bf16 pair (q - 8), low element first.
__device__ __forceinline__ unsigned code_pair(unsigned w, unsigned shift) {
  const float lo = static_cast<float>(static_cast<int>((w >> shift) & 0xfu) - 8);
  const float hi = static_cast<float>(static_cast<int>((w >> (shift + 4)) & 0xfu) - 8);
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&pair);
}

template <unsigned BM, unsigned BN, unsigned BK, unsigned WARPS_M, unsigned WARPS_N>
struct TileShape {
  static_assert(kGroup % BK == 0, "a K chunk never spans two scale groups");
  static_assert(BK % 16 == 0 && BM % (16 * WARPS_M) == 0 && BN % (8 * WARPS_N) == 0, "tile shape");
  static constexpr unsigned kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr unsigned kWarpM = BM / WARPS_M;  // rows of the warp's sub-tile
  static constexpr unsigned kWarpN = BN / WARPS_N;  // columns of the warp's sub-tile
  static constexpr unsigned kMTiles = kWarpM / 16;
  static constexpr unsigned kNTiles = kWarpN / 8;
};

// Issues (or, for STAGES == 1, performs) the loads of K chunk `k0` into `stage`.
template <unsigned BM, unsigned BN, unsigned BK, unsigned THREADS, bool ASYNC>
__device__ __forceinline__ void load_tile(TileStage<BM, BN, BK>& stage, const __nv_bfloat16* __restrict__ x,
                                          const unsigned* __restrict__ qweight, unsigned m, unsigned n, unsigned k,
                                          unsigned m0, unsigned n0, unsigned k0) {
  using Stage = TileStage<BM, BN, BK>;
  constexpr unsigned kAChunks = BM * BK / 8;        // 16-byte pieces of the A tile
  constexpr unsigned kBChunks = BN * BK / 32;       // 16-byte pieces of the B tile
  constexpr unsigned kAPerRow = BK / 8;
  constexpr unsigned kBPerRow = BK / 32;
#pragma unroll
  for (unsigned i = threadIdx.x; i < kAChunks; i += THREADS) {
    const unsigned r = i / kAPerRow;
    const unsigned c = i % kAPerRow;
    const bool valid = m0 + r < m;
    const __nv_bfloat16* src = x + static_cast<size_t>(valid ? m0 + r : 0) * k + k0 + c * 8;
    __nv_bfloat16* dst = stage.a + r * Stage::kAStride + c * 8;
    if constexpr (ASYNC) {
      cp_async16(dst, src, valid);
    } else {
      *reinterpret_cast<uint4*>(dst) = valid ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (unsigned i = threadIdx.x; i < kBChunks; i += THREADS) {
    const unsigned r = i / kBPerRow;
    const unsigned c = i % kBPerRow;
    const bool valid = n0 + r < n;
    const unsigned* src = qweight + static_cast<size_t>(valid ? n0 + r : 0) * (k / 8) + k0 / 8 + c * 4;
    unsigned* dst = stage.b + r * Stage::kBStride + c * 4;
    if constexpr (ASYNC) {
      cp_async16(dst, src, valid);
    } else {
      *reinterpret_cast<uint4*>(dst) = valid ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0, 0, 0, 0);
    }
  }
}

// The per-thread accumulators and the math of one warp on one stage.
template <unsigned BM, unsigned BN, unsigned BK, unsigned WARPS_M, unsigned WARPS_N>
struct TileMath {
  using Shape = TileShape<BM, BN, BK, WARPS_M, WARPS_N>;
  using Stage = TileStage<BM, BN, BK>;
  float acc[Shape::kMTiles][Shape::kNTiles][4];
  float part[Shape::kMTiles][Shape::kNTiles][4];

  __device__ void clear() {
#pragma unroll
    for (unsigned i = 0; i < Shape::kMTiles; ++i)
#pragma unroll
      for (unsigned j = 0; j < Shape::kNTiles; ++j)
#pragma unroll
        for (unsigned e = 0; e < 4; ++e) acc[i][j][e] = part[i][j][e] = 0.f;
  }

  // part += A_chunk · B_chunkᵀ for this warp's sub-tile.
  __device__ void compute(const Stage& stage, unsigned warp_m, unsigned warp_n, unsigned lane) {
    const unsigned g = lane >> 2;  // groupID
    const unsigned t = lane & 3u;  // threadID_in_group
#pragma unroll
    for (unsigned kk = 0; kk < BK; kk += 16) {
      unsigned a[Shape::kMTiles][4];
#pragma unroll
      for (unsigned i = 0; i < Shape::kMTiles; ++i) {
        const unsigned row = warp_m * Shape::kWarpM + i * 16 + g;
        const __nv_bfloat16* lo = stage.a + row * Stage::kAStride + kk + 2 * t;
        const __nv_bfloat16* hi = lo + 8 * Stage::kAStride;
        a[i][0] = *reinterpret_cast<const unsigned*>(lo);      // row g,   k 2t..2t+1
        a[i][1] = *reinterpret_cast<const unsigned*>(hi);      // row g+8, k 2t..2t+1
        a[i][2] = *reinterpret_cast<const unsigned*>(lo + 8);  // row g,   k 2t+8..2t+9
        a[i][3] = *reinterpret_cast<const unsigned*>(hi + 8);  // row g+8, k 2t+8..2t+9
      }
#pragma unroll
      for (unsigned j = 0; j < Shape::kNTiles; ++j) {
        const unsigned col = warp_n * Shape::kWarpN + j * 8 + g;
        const uint2 words = *reinterpret_cast<const uint2*>(stage.b + col * Stage::kBStride + kk / 8);
        // b0,b1: k 2t, 2t+1 (first word); b2,b3: k 2t+8, 2t+9 (second word); column n = g.
        const unsigned b[2] = {code_pair(words.x, 8 * t), code_pair(words.y, 8 * t)};
#pragma unroll
        for (unsigned i = 0; i < Shape::kMTiles; ++i) mma_bf16_16816(part[i][j], a[i], b);
      }
    }
  }

  // acc += part * scale for the finished group, then part = 0.
  __device__ void flush(const __half* __restrict__ scales, unsigned n, unsigned k, unsigned n0, unsigned group,
                        unsigned warp_n, unsigned lane) {
    const unsigned t = lane & 3u;
    const unsigned groups = k / kGroup;
#pragma unroll
    for (unsigned j = 0; j < Shape::kNTiles; ++j) {
      const unsigned col = n0 + warp_n * Shape::kWarpN + j * 8 + 2 * t;
      const float s0 = col < n ? __half2float(scales[static_cast<size_t>(col) * groups + group]) : 0.f;
      const float s1 = col + 1 < n ? __half2float(scales[static_cast<size_t>(col + 1) * groups + group]) : 0.f;
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

// A block size other than the tile's is a launch error, not a silent wrong answer.
template <unsigned THREADS>
__device__ __forceinline__ void require_block() {
  if (blockDim.x != THREADS || blockDim.y != 1 || blockDim.z != 1) __trap();
}

template <unsigned BM, unsigned BN, unsigned BK, unsigned STAGES, unsigned WARPS_M, unsigned WARPS_N>
__device__ void w4a16_tile_gemm(const __nv_bfloat16* __restrict__ x, const unsigned* __restrict__ qweight,
                                const __half* __restrict__ scales, __nv_bfloat16* __restrict__ y, unsigned m,
                                unsigned n, unsigned k) {
  using Shape = TileShape<BM, BN, BK, WARPS_M, WARPS_N>;
  using Stage = TileStage<BM, BN, BK>;
  static_assert(STAGES * sizeof(Stage) <= 48 * 1024, "static shared memory limit");
  require_block<Shape::kThreads>();
  __shared__ Stage stages[STAGES];

  const unsigned n0 = blockIdx.x * BN;
  const unsigned m0 = blockIdx.y * BM;
  if (n0 >= n || m0 >= m) return;  // uniform per block
  const unsigned warp = threadIdx.x >> 5;
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp_m = warp / WARPS_N;
  const unsigned warp_n = warp % WARPS_N;
  const unsigned chunks = k / BK;

  TileMath<BM, BN, BK, WARPS_M, WARPS_N> math;
  math.clear();

  if constexpr (STAGES == 1) {
    for (unsigned c = 0; c < chunks; ++c) {
      load_tile<BM, BN, BK, Shape::kThreads, false>(stages[0], x, qweight, m, n, k, m0, n0, c * BK);
      __syncthreads();
      math.compute(stages[0], warp_m, warp_n, lane);
      __syncthreads();  // the stage is overwritten next
      if ((c + 1) * BK % kGroup == 0) math.flush(scales, n, k, n0, c * BK / kGroup, warp_n, lane);
    }
  } else {
    // Prologue: chunks 0 .. STAGES-2 in flight. One commit group per chunk slot, empty or not,
    // so "chunk c has landed" is always "at most STAGES-2 groups pending".
#pragma unroll
    for (unsigned s = 0; s + 1 < STAGES; ++s) {
      if (s < chunks) load_tile<BM, BN, BK, Shape::kThreads, true>(stages[s], x, qweight, m, n, k, m0, n0, s * BK);
      cp_async_commit();
    }
    for (unsigned c = 0; c < chunks; ++c) {
      cp_async_wait<STAGES - 2>();
      // Makes chunk c visible to all, and guarantees every warp is done with chunk c-1, whose
      // stage the next load reuses.
      __syncthreads();
      const unsigned next = c + STAGES - 1;
      if (next < chunks) {
        load_tile<BM, BN, BK, Shape::kThreads, true>(stages[next % STAGES], x, qweight, m, n, k, m0, n0, next * BK);
      }
      cp_async_commit();
      math.compute(stages[c % STAGES], warp_m, warp_n, lane);
      if ((c + 1) * BK % kGroup == 0) math.flush(scales, n, k, n0, c * BK / kGroup, warp_n, lane);
    }
    cp_async_wait<0>();
  }
  math.store(y, m, n, m0, n0, warp_m, warp_n, lane);
}

}  // namespace metrale
