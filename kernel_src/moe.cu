// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `moe` (docs/kernels.md): router GEMM, top-k softmax, row gather, the grouped W4A16
// expert GEMM and the weighted combine. The contract fixes grids, not block sizes, so every
// kernel here is correct for any 1-D block (1..1024 threads); 128 or 256 is a good choice.
#include "metrale_common.cuh"

namespace {

constexpr unsigned kRouterExpertsPerBlock = 64;
constexpr unsigned kGroupedColumns = 128;  // N columns per block of the grouped GEMM
constexpr unsigned kGroupedRows = 16;      // activation rows per pass over an expert's weights

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
// W4A16 weight (stacked [E][N][K/8] codes and [E][N][K/128] scales). Grid (ceil(n/128), experts).
// Per 128-wide K group the block stages the expert's codes, scales and up to 16 activation rows in
// shared memory; each thread owns output columns. Weights are read once per 16 rows of the expert.
extern "C" __global__ void w4a16_grouped_gemm(const __nv_bfloat16* x, const unsigned* qweight, const __half* scales,
                                              const int* offsets, __nv_bfloat16* y, unsigned n, unsigned k,
                                              unsigned experts) {
  __shared__ unsigned codes[kGroupedColumns][metrale::kGroup / 8 + 1];  // +1: conflict-free columns
  __shared__ float group_scale[kGroupedColumns];
  __shared__ float xs[kGroupedRows][metrale::kGroup];
  const unsigned expert = blockIdx.y;
  if (expert >= experts) return;
  const int row_begin = offsets[expert];
  const int row_end = offsets[expert + 1];
  if (row_end <= row_begin) return;  // uniform: an expert without rows does nothing
  const unsigned n0 = blockIdx.x * kGroupedColumns;
  if (n0 >= n) return;
  const unsigned groups = k / metrale::kGroup;
  const unsigned* qe = qweight + static_cast<size_t>(expert) * n * (k / 8);
  const __half* se = scales + static_cast<size_t>(expert) * n * groups;
  const unsigned tid = threadIdx.x;

  for (int r0 = row_begin; r0 < row_end; r0 += kGroupedRows) {
    const unsigned rows = min(static_cast<unsigned>(row_end - r0), kGroupedRows);
    // A thread owns columns tid, tid + blockDim.x, ... of the block's 128; passes cover them all.
    for (unsigned pass = 0; pass < kGroupedColumns; pass += blockDim.x) {
      const unsigned col = pass + tid;
      float acc[kGroupedRows];
#pragma unroll
      for (unsigned r = 0; r < kGroupedRows; ++r) acc[r] = 0.f;
      for (unsigned g = 0; g < groups; ++g) {
        __syncthreads();  // the previous group's tiles are no longer read
        for (unsigned i = tid; i < kGroupedColumns * (metrale::kGroup / 8); i += blockDim.x) {
          const unsigned c = i / (metrale::kGroup / 8);
          const unsigned w = i % (metrale::kGroup / 8);
          codes[c][w] = n0 + c < n ? qe[static_cast<size_t>(n0 + c) * (k / 8) + g * (metrale::kGroup / 8) + w] : 0u;
        }
        for (unsigned c = tid; c < kGroupedColumns; c += blockDim.x) {
          group_scale[c] = n0 + c < n ? __half2float(se[static_cast<size_t>(n0 + c) * groups + g]) : 0.f;
        }
        for (unsigned i = tid; i < kGroupedRows * metrale::kGroup; i += blockDim.x) {
          const unsigned r = i / metrale::kGroup;
          const unsigned kk = i % metrale::kGroup;
          xs[r][kk] = r < rows ? metrale::to_f32(x[static_cast<size_t>(r0 + r) * k + g * metrale::kGroup + kk]) : 0.f;
        }
        __syncthreads();
        if (col < kGroupedColumns) {
          float part[kGroupedRows];
#pragma unroll
          for (unsigned r = 0; r < kGroupedRows; ++r) part[r] = 0.f;
          for (unsigned w = 0; w < metrale::kGroup / 8; ++w) {
            const unsigned word = codes[col][w];
#pragma unroll
            for (unsigned j = 0; j < 8; ++j) {
              const float q = static_cast<float>(static_cast<int>((word >> (4 * j)) & 0xfu) - 8);
#pragma unroll
              for (unsigned r = 0; r < kGroupedRows; ++r) part[r] = fmaf(xs[r][w * 8 + j], q, part[r]);
            }
          }
          const float s = group_scale[col];
#pragma unroll
          for (unsigned r = 0; r < kGroupedRows; ++r) acc[r] = fmaf(part[r], s, acc[r]);
        }
      }
      if (col < kGroupedColumns && n0 + col < n) {
        for (unsigned r = 0; r < rows; ++r) {
          y[static_cast<size_t>(r0 + r) * n + n0 + col] = metrale::to_bf16(acc[r]);
        }
      }
    }
  }
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
