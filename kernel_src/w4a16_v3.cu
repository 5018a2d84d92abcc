// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `w4a16_v3`: the N128×M128 tile of v2 (grid (ceil(n/128), ceil(m/128)), block 256) fed by
// Hopper's bulk-copy engine: warp 0 issues one cp.async.bulk per tile row into a ring of stages,
// each of 3 stages completing on its own mbarrier by transaction count, so the other warps spend no
// instructions on loads. Needs sm_90 (cp.async.bulk, mbarrier expect_tx); the manifest gates it.
#include "tile_bf16.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "w4a16_v3.cu needs sm_90 or newer (cp.async.bulk); the manifest's min_target gates it"
#endif

namespace {

constexpr unsigned kBM = 128;
constexpr unsigned kBN = 128;
constexpr unsigned kBK = 32;
constexpr unsigned kStages = 3;
constexpr unsigned kWarpsM = 2;
constexpr unsigned kWarpsN = 4;

using Stage = metrale::TileStage<kBM, kBN, kBK, 4>;
using Shape = metrale::TileShape<kBM, kBN, kWarpsM, kWarpsN>;
static_assert(Stage::kAStride * 2 % 16 == 0 && Stage::kBStride * 4 % 16 == 0, "bulk copies need 16-byte rows");

// Warp 0: one bulk copy per in-range row of chunk `c` into `stage`; lane 0 arms the barrier
// with the total. Rows past m or n are not copied: their products land only in outputs that
// are never stored.
__device__ __forceinline__ void issue_chunk(Stage& stage, unsigned long long* bar, const __nv_bfloat16* x,
                                            const unsigned* qweight, unsigned m, unsigned n, unsigned k, unsigned m0,
                                            unsigned n0, unsigned c, unsigned lane) {
  const unsigned a_rows = min(kBM, m - m0);
  const unsigned b_rows = min(kBN, n - n0);
  constexpr unsigned kARowBytes = kBK * 2;
  constexpr unsigned kBRowBytes = kBK / 2;
  if (lane == 0) metrale::mbarrier_arrive_expect_tx(bar, a_rows * kARowBytes + b_rows * kBRowBytes);
  const unsigned k0 = c * kBK;
  for (unsigned r = lane; r < a_rows; r += 32) {
    metrale::bulk_copy(stage.a + r * Stage::kAStride, x + static_cast<size_t>(m0 + r) * k + k0, kARowBytes, bar);
  }
  for (unsigned r = lane; r < b_rows; r += 32) {
    metrale::bulk_copy(stage.b + r * Stage::kBStride, qweight + static_cast<size_t>(n0 + r) * (k / 8) + k0 / 8, kBRowBytes,
              bar);
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256)
    w4a16_gemm_t_m128_v3(const __nv_bfloat16* x, const unsigned* qweight, const __half* scales, __nv_bfloat16* y,
                         unsigned m, unsigned n, unsigned k) {
  static_assert(kStages * sizeof(Stage) + kStages * 8 <= 48 * 1024, "static shared memory limit");
  metrale::require_block<Shape::kThreads>();
  __shared__ Stage stages[kStages];
  __shared__ unsigned long long full[kStages];  // mbarriers (8-byte aligned as a type)

  const unsigned n0 = blockIdx.x * kBN;
  const unsigned m0 = blockIdx.y * kBM;
  if (n0 >= n || m0 >= m) return;  // uniform per block
  const unsigned warp = threadIdx.x >> 5;
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp_m = warp / kWarpsN;
  const unsigned warp_n = warp % kWarpsN;
  const unsigned chunks = k / kBK;

  if (threadIdx.x == 0) {
    for (unsigned s = 0; s < kStages; ++s) metrale::mbarrier_init(&full[s], 1);
    metrale::mbarrier_init_fence();
  }
  __syncthreads();

  if (warp == 0) {
    for (unsigned c = 0; c + 1 < kStages && c < chunks; ++c) {
      issue_chunk(stages[c], &full[c], x, qweight, m, n, k, m0, n0, c, lane);
    }
  }

  const metrale::QuantWeights<metrale::W4Sym> w{qweight, scales, nullptr, n, k, metrale::kGroup};
  metrale::TileMath<metrale::W4Sym, kBM, kBN, kBK, kWarpsM, kWarpsN> math;
  math.clear();
  for (unsigned c = 0; c < chunks; ++c) {
    // Everyone is done with chunk c-1, so its stage may be refilled with chunk c+2.
    __syncthreads();
    const unsigned next = c + kStages - 1;
    if (warp == 0 && next < chunks) {
      // Order this block's earlier (generic-proxy) reads of the stage before the async writes.
      metrale::fence_proxy_async();
      issue_chunk(stages[next % kStages], &full[next % kStages], x, qweight, m, n, k, m0, n0, next, lane);
    }
    // The stage's (c / kStages)-th use completes that phase of its barrier.
    metrale::mbarrier_wait(&full[c % kStages], (c / kStages) & 1u);
    math.compute(stages[c % kStages], w, n0, c * kBK, m - m0, warp_m, warp_n, lane);
  }
  math.store(y, m, n, m0, n0, warp_m, warp_n, lane);
}
