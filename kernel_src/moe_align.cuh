// SPDX-License-Identifier: MIT OR Apache-2.0
// Device-side MoE routing (moe/moe_align, docs/kernels.md), one block of any size: checks every
// expert id (one out of range traps before anything is written), counts rows per expert with
// atomics into `offsets`, scans the counts (block-wide, in chunks of the block) into each
// expert's first row while listing the active experts, then places the (token, choice) pairs in
// flat order — one warp, 32 at a time: lanes holding the same expert rank themselves with
// __match_any_sync and advance that expert's cursor, offsets[1 + e], which ends at the expert's
// last row + 1, i.e. offsets[e + 1]. Blocks smaller than a warp place on one thread.
#pragma once

#include "metrale_common.cuh"

namespace metrale {

struct AlignArgs {
  const int* ids;
  const float* topk_weights;
  const float* shared_logits;
  int* offsets;
  int* rows;
  int* slots;
  float* combine_weights;
  int* active;
  unsigned m, e, k, shared;
  __device__ unsigned pairs() const { return m * k; }
  __device__ unsigned slots_per_token() const { return k + (shared != 0 ? 1 : 0); }
  // Grouped row `pos` holds flat pair i = token · k + choice.
  __device__ void place(unsigned i, int pos) const {
    const unsigned token = i / k;
    const unsigned at = token * slots_per_token() + i % k;
    rows[pos] = static_cast<int>(token);
    slots[at] = pos;
    combine_weights[at] = topk_weights[i];
  }
};

// Every id within 0..e-1 and `shared` one of 0, 1, 2; else the launch fails, nothing written.
__device__ inline void align_check(const AlignArgs& a) {
  __shared__ int bad;
  if (threadIdx.x == 0) bad = a.shared > 2 ? 1 : 0;
  __syncthreads();
  for (unsigned i = threadIdx.x; i < a.pairs(); i += blockDim.x) {
    if (static_cast<unsigned>(a.ids[i]) >= a.e) bad = 1;
  }
  __syncthreads();
  if (bad != 0) __trap();
}

// offsets[1 + x] = Σ_{y < x} count[y] (each expert's first grouped row); active[1..] the experts
// with rows, in order, active[0] their number. On entry offsets[1 + x] = count[x].
__device__ inline void align_scan(const AlignArgs& a) {
  __shared__ int rows_sum[1024];
  __shared__ int active_sum[1024];
  __shared__ int carry[2];
  const unsigned tid = threadIdx.x;
  if (tid == 0) carry[0] = carry[1] = 0;
  for (unsigned base = 0; base < a.e; base += blockDim.x) {
    const unsigned x = base + tid;
    const int count = x < a.e ? a.offsets[1 + x] : 0;
    rows_sum[tid] = count;
    active_sum[tid] = count > 0 ? 1 : 0;
    __syncthreads();
    for (unsigned span = 1; span < blockDim.x; span <<= 1) {  // inclusive scan (Hillis–Steele)
      const int r = tid >= span ? rows_sum[tid - span] : 0;
      const int s = tid >= span ? active_sum[tid - span] : 0;
      __syncthreads();
      rows_sum[tid] += r;
      active_sum[tid] += s;
      __syncthreads();
    }
    if (x < a.e) {
      a.offsets[1 + x] = carry[0] + rows_sum[tid] - count;
      if (count > 0) a.active[carry[1] + active_sum[tid]] = static_cast<int>(x);  // 1-based slot
    }
    __syncthreads();
    if (tid == blockDim.x - 1) {
      carry[0] += rows_sum[tid];
      carry[1] += active_sum[tid];
    }
    __syncthreads();
  }
  if (tid == 0) a.active[0] = carry[1];
}

// Places every pair at its expert's cursor, in flat (token, choice) order.
__device__ inline void align_place(const AlignArgs& a) {
  const unsigned total = a.pairs();
  if (blockDim.x < 32) {
    if (threadIdx.x != 0) return;
    for (unsigned i = 0; i < total; ++i) a.place(i, a.offsets[1 + a.ids[i]]++);
    return;
  }
  const unsigned lane = threadIdx.x;
  if (lane >= 32) return;
  for (unsigned base = 0; base < total; base += 32) {
    const unsigned i = base + lane;
    const bool valid = i < total;
    const int expert = valid ? a.ids[i] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, expert);
    const unsigned rank = __popc(peers & ((1u << lane) - 1u));
    const int pos = valid ? a.offsets[1 + expert] + static_cast<int>(rank) : 0;
    __syncwarp();  // every peer has read the cursor before the last of them advances it
    if (valid && rank + 1 == static_cast<unsigned>(__popc(peers))) a.offsets[1 + expert] = pos + 1;
    __syncwarp();
    if (valid) a.place(i, pos);
  }
}

__device__ inline void moe_align_body(const AlignArgs& a) {
  align_check(a);
  for (unsigned x = threadIdx.x; x <= a.e; x += blockDim.x) a.offsets[x] = 0;
  __syncthreads();
  for (unsigned i = threadIdx.x; i < a.pairs(); i += blockDim.x) atomicAdd(&a.offsets[1 + a.ids[i]], 1);
  __syncthreads();
  align_scan(a);
  __syncthreads();
  if (a.shared != 0) {
    const unsigned s = a.slots_per_token();
    for (unsigned r = threadIdx.x; r < a.m; r += blockDim.x) {
      a.slots[r * s + a.k] = static_cast<int>(a.pairs() + r);
      a.combine_weights[r * s + a.k] = a.shared == 1 ? 1.f : 1.f / (1.f + expf(-a.shared_logits[r]));
    }
  }
  align_place(a);
}

}  // namespace metrale
