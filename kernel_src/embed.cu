// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `embed` (docs/kernels.md): out[r] = table[ids[r]], rows of h bf16. Grid (t, 1), any
// 1-D block size. Every block checks every id before any block can have written: an id outside
// 0..vocab-1 traps (the launch fails) with nothing written.
#include "metrale_common.cuh"

extern "C" __global__ void embedding(const __nv_bfloat16* table, const int* ids, __nv_bfloat16* out, unsigned t,
                                     unsigned h, unsigned vocab) {
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (unsigned i = threadIdx.x; i < t; i += blockDim.x) {
    if (static_cast<unsigned>(ids[i]) >= vocab) bad = 1;
  }
  __syncthreads();
  if (bad != 0) __trap();
  const unsigned r = blockIdx.x;
  if (r >= t) return;
  const __nv_bfloat16* src = table + static_cast<size_t>(static_cast<unsigned>(ids[r])) * h;
  __nv_bfloat16* dst = out + static_cast<size_t>(r) * h;
  for (unsigned j = threadIdx.x; j < h; j += blockDim.x) dst[j] = src[j];
}
