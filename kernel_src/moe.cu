// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `moe` (docs/kernels.md): router GEMM, top-k softmax, device-side routing (moe_align),
// row gather, the grouped W4A16 expert GEMM and the weighted combine. The contract fixes grids,
// not block sizes, so every kernel here but the grouped GEMM (a tensor-core tile of exactly 128
// threads) is correct for any 1-D block (1..1024 threads); 128 or 256 is a good choice.
#include "metrale_common.cuh"
#include "moe_align.cuh"
#include "tile_bf16.cuh"

namespace {

constexpr unsigned kRouterExpertsPerBlock = 64;

}  // namespace

// logits[r][e] = Σ_h x[r][h] · w[e][h]; grid (ceil(e/64), m).
extern "C" __global__ void router_gemm(const __nv_bfloat16* x, const float* w, float* logits, unsigned m,
                                       unsigned e, unsigned h) {
  const unsigned row = blockIdx.y;
  if (row >= m) return;
  const unsigned first = blockIdx.x * kRouterExpertsPerBlock;
  const unsigned last = min(first + kRouterExpertsPerBlock, e);
  const __nv_bfloat16* xr = x + static_cast<size_t>(row) * h;
  const unsigned warps = blockDim.x / 32;
  if (warps > 0) {
    // Whole warps only: shuffles need all 32 lanes; threads of a trailing partial warp idle.
    const unsigned warp = threadIdx.x / 32;
    const unsigned lane = threadIdx.x % 32;
    if (warp >= warps) return;
    for (unsigned ex = first + warp; ex < last; ex += warps) {
      const float* wr = w + static_cast<size_t>(ex) * h;
      float sum = 0.f;
      for (unsigned j = lane; j < h; j += 32) sum = fmaf(metrale::to_f32(xr[j]), wr[j], sum);
      sum = metrale::warp_sum(sum);
      if (lane == 0) logits[static_cast<size_t>(row) * e + ex] = sum;
    }
  } else {
    for (unsigned ex = first + threadIdx.x; ex < last; ex += blockDim.x) {
      const float* wr = w + static_cast<size_t>(ex) * h;
      float sum = 0.f;
      for (unsigned j = 0; j < h; ++j) sum = fmaf(metrale::to_f32(xr[j]), wr[j], sum);
      logits[static_cast<size_t>(row) * e + ex] = sum;
    }
  }
}

// Softmax over e logits per row, then the k largest probabilities in descending order (ties:
// lower expert id first), optionally renormalised to sum 1. Grid (m, 1).
extern "C" __global__ void topk_softmax(const float* logits, int* ids, float* weights, unsigned m, unsigned e,
                                        unsigned k, unsigned renormalize) {
  __shared__ float scratch[1024];
  __shared__ float best_p[1024];
  __shared__ int best_id[1024];
  __shared__ int chosen[64];
  const unsigned row = blockIdx.x;
  if (row >= m) return;
  const float* l = logits + static_cast<size_t>(row) * e;
  const unsigned tid = threadIdx.x;

  float local_max = __int_as_float(0xff800000);  // -inf
  for (unsigned j = tid; j < e; j += blockDim.x) local_max = fmaxf(local_max, l[j]);
  const float max_logit = metrale::block_reduce(local_max, scratch, [](float a, float b) { return fmaxf(a, b); });
  float local_sum = 0.f;
  for (unsigned j = tid; j < e; j += blockDim.x) local_sum += expf(l[j] - max_logit);
  const float sum = metrale::block_reduce(local_sum, scratch, [](float a, float b) { return a + b; });

  float picked_sum = 0.f;  // meaningful in thread 0
  for (unsigned slot = 0; slot < k; ++slot) {
    // Each thread's best candidate not yet chosen; earlier picks are in `chosen` (or, past 64
    // picks, recognisable because they rank above the previous pick).
    float p = -1.f;
    int id = 0x7fffffff;
    for (unsigned j = tid; j < e; j += blockDim.x) {
      bool taken = false;
      for (unsigned s = 0; s < min(slot, 64u); ++s) taken |= chosen[s] == static_cast<int>(j);
      if (taken) continue;
      const float pj = expf(l[j] - max_logit) / sum;
      if (slot >= 64) {
        // Beyond the chosen list: only candidates strictly after the previous pick in order.
        const float prev_p = weights[static_cast<size_t>(row) * k + slot - 1];
        const int prev_id = ids[static_cast<size_t>(row) * k + slot - 1];
        if (pj > prev_p || (pj == prev_p && static_cast<int>(j) <= prev_id)) continue;
      }
      if (pj > p || (pj == p && static_cast<int>(j) < id)) {
        p = pj;
        id = static_cast<int>(j);
      }
    }
    best_p[tid] = p;
    best_id[tid] = id;
    __syncthreads();
    unsigned span = 1;
    while (span < blockDim.x) span <<= 1;
    for (unsigned s = span >> 1; s > 0; s >>= 1) {
      if (tid < s && tid + s < blockDim.x) {
        const float q = best_p[tid + s];
        const int qi = best_id[tid + s];
        if (q > best_p[tid] || (q == best_p[tid] && qi < best_id[tid])) {
          best_p[tid] = q;
          best_id[tid] = qi;
        }
      }
      __syncthreads();
    }
    if (tid == 0) {
      const bool found = best_p[0] >= 0.f;
      const int chosen_id = found ? best_id[0] : -1;
      const float chosen_p = found ? best_p[0] : 0.f;
      if (slot < 64) chosen[slot] = chosen_id;
      ids[static_cast<size_t>(row) * k + slot] = chosen_id;
      weights[static_cast<size_t>(row) * k + slot] = chosen_p;
      picked_sum += chosen_p;
    }
    __syncthreads();
  }
  if (renormalize != 0 && tid == 0 && picked_sum > 0.f) {
    for (unsigned slot = 0; slot < k; ++slot) weights[static_cast<size_t>(row) * k + slot] /= picked_sum;
  }
}

// The host-side routing after topk_softmax, on the device: offsets, rows, slots, combine weights
// and the active experts from ids [M][k] (moe_align.cuh). Grid (1, 1), any block size.
extern "C" __global__ void moe_align(const int* ids, const float* topk_weights, const float* shared_logits,
                                     int* offsets, int* rows, int* slots, float* combine_weights, int* active,
                                     unsigned m, unsigned e, unsigned k, unsigned shared) {
  if (blockIdx.x != 0 || blockIdx.y != 0) return;
  const metrale::AlignArgs a{ids, topk_weights, shared_logits, offsets, rows, slots, combine_weights, active, m, e, k,
                             shared};
  metrale::moe_align_body(a);
}

// out[i] = x[rows[i]] for i < t: bf16 rows of h. Grid (t, 1).
extern "C" __global__ void moe_gather(const __nv_bfloat16* x, const int* rows, __nv_bfloat16* out, unsigned t,
                                      unsigned h) {
  const unsigned i = blockIdx.x;
  if (i >= t) return;
  const __nv_bfloat16* src = x + static_cast<size_t>(rows[i]) * h;
  __nv_bfloat16* dst = out + static_cast<size_t>(i) * h;
  for (unsigned j = threadIdx.x; j < h; j += blockDim.x) dst[j] = src[j];
}

// Rows [offsets[e], offsets[e+1]) of x belong to expert e; y = x · W_eᵀ with W_e the expert's
// W4A16 weight (stacked [E][N][K/8] codes and [E][N][K/128] scales). Grid (ceil(n/128), experts),
// block 128: the N128×M64 tensor-core tile of module w4a16 (3-stage cp.async) over each 64 of
// the expert's rows; m-tiles past its rows are skipped.
extern "C" __global__ void __launch_bounds__(128)
    w4a16_grouped_gemm(const __nv_bfloat16* x, const unsigned* qweight, const __half* scales, const int* offsets,
                       __nv_bfloat16* y, unsigned n, unsigned k, unsigned experts) {
  const metrale::QuantWeights<metrale::W4Sym> w{qweight, scales, nullptr, n, k, metrale::kGroup};
  metrale::bf16_tile_grouped<metrale::W4Sym, 64, 128, 32, 3, 1, 4>(x, w, offsets, y, experts);
}

// out[r] = Σ_j weights[r][j] · expert_out[slots[r*k + j]] in f32, stored bf16. Grid (m, 1).
extern "C" __global__ void moe_combine(const __nv_bfloat16* expert_out, const int* slots, const float* weights,
                                       __nv_bfloat16* out, unsigned m, unsigned k, unsigned h) {
  const unsigned row = blockIdx.x;
  if (row >= m) return;
  const int* s = slots + static_cast<size_t>(row) * k;
  const float* w = weights + static_cast<size_t>(row) * k;
  for (unsigned j = threadIdx.x; j < h; j += blockDim.x) {
    float sum = 0.f;
    for (unsigned t = 0; t < k; ++t) sum = fmaf(w[t], metrale::to_f32(expert_out[static_cast<size_t>(s[t]) * h + j]), sum);
    out[static_cast<size_t>(row) * h + j] = metrale::to_bf16(sum);
  }
}
