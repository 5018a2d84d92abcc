// SPDX-License-Identifier: MIT OR Apache-2.0
// Building blocks of every tensor-core tile GEMM: the warp arrangement of a tile, the copy of a
// tile of rows into shared memory (edges zero-filled), and the K-chunk pipeline.
//
// Pipeline: STAGES == 1 loads each chunk with plain 16-byte loads, then computes; STAGES >= 2 is
// a cp.async ring that keeps STAGES - 1 chunks in flight while one is computed. Rows past m and
// n are zero-filled and never stored, so the edges need no special case in the math.
#pragma once

#include "metrale_common.cuh"
#include "metrale_ptx.cuh"

namespace metrale {

// BM×BN output tile, WARPS_M×WARPS_N warps, each warp a grid of 16×8 mma tiles.
template <unsigned BM, unsigned BN, unsigned WARPS_M, unsigned WARPS_N>
struct TileShape {
  static_assert(BM % (16 * WARPS_M) == 0 && BN % (8 * WARPS_N) == 0, "tile shape");
  static constexpr unsigned kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr unsigned kWarpM = BM / WARPS_M;  // rows of the warp's sub-tile
  static constexpr unsigned kWarpN = BN / WARPS_N;  // columns of the warp's sub-tile
  static constexpr unsigned kMTiles = kWarpM / 16;
  static constexpr unsigned kNTiles = kWarpN / 8;
};

// A block size other than the tile's is a launch error, not a silent wrong answer.
template <unsigned THREADS>
__device__ __forceinline__ void require_block() {
  if (blockDim.x != THREADS || blockDim.y != 1 || blockDim.z != 1) __trap();
}

// ROWS rows of ROW_BYTES (a multiple of 16) from global memory (row r at src + r·src_stride
// bytes) into shared memory rows DST_STRIDE bytes apart; rows >= valid are zero-filled, not read.
template <unsigned ROWS, unsigned ROW_BYTES, unsigned DST_STRIDE, unsigned THREADS, bool ASYNC>
__device__ __forceinline__ void load_rows(void* dst, const void* src, size_t src_stride, unsigned valid) {
  static_assert(ROW_BYTES % 16 == 0 && DST_STRIDE % 16 == 0, "16-byte pieces");
  constexpr unsigned kPerRow = ROW_BYTES / 16;
#pragma unroll
  for (unsigned i = threadIdx.x; i < ROWS * kPerRow; i += THREADS) {
    const unsigned r = i / kPerRow;
    const unsigned c = i % kPerRow;
    const bool ok = r < valid;
    const char* from = static_cast<const char*>(src) + (ok ? r : 0) * src_stride + c * 16;
    char* to = static_cast<char*>(dst) + r * DST_STRIDE + c * 16;
    if constexpr (ASYNC) {
      cp_async16(to, from, ok);
    } else {
      *reinterpret_cast<uint4*>(to) = ok ? __ldg(reinterpret_cast<const uint4*>(from)) : make_uint4(0, 0, 0, 0);
    }
  }
}

// ops.compute(stage, c) for every K chunk c < chunks, ops.load<async>(stage, c) filling the
// stages first. Every warp is done with the stages when it returns.
template <unsigned STAGES, class Ops>
__device__ __forceinline__ void run_pipeline(unsigned chunks, Ops& ops) {
  if constexpr (STAGES == 1) {
    for (unsigned c = 0; c < chunks; ++c) {
      ops.template load<false>(0u, c);
      __syncthreads();
      ops.compute(0u, c);
      __syncthreads();  // the stage is overwritten next
    }
  } else {
    // Prologue: chunks 0 .. STAGES-2 in flight. One commit group per chunk slot, empty or not,
    // so "chunk c has landed" is always "at most STAGES-2 groups pending".
#pragma unroll
    for (unsigned s = 0; s + 1 < STAGES; ++s) {
      if (s < chunks) ops.template load<true>(s, s);
      cp_async_commit();
    }
    for (unsigned c = 0; c < chunks; ++c) {
      cp_async_wait<STAGES - 2>();
      // Makes chunk c visible to all, and guarantees every warp is done with chunk c-1, whose
      // stage the next load reuses.
      __syncthreads();
      const unsigned next = c + STAGES - 1;
      if (next < chunks) ops.template load<true>(next % STAGES, next);
      cp_async_commit();
      ops.compute(c % STAGES, c);
    }
    cp_async_wait<0>();
    __syncthreads();
  }
}

}  // namespace metrale
