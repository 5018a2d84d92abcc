// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `sample` (docs/kernels.md): greedy choice on the device, so that a step copies one i32
// per row back instead of the row's logits. argmax follows torch.argmax: the largest value, NaN
// above every number, the lowest index among equals (+0 equals -0; the first NaN wins).
// Grid (m, 1), one row per block, any 1-D block size up to 1024.
#include "metrale_common.cuh"

namespace {

struct ArgmaxCandidate {
  float value;
  unsigned index;
};

// Whether `a` comes before `b` in torch.argmax's order.
__device__ __forceinline__ bool argmax_before(ArgmaxCandidate a, ArgmaxCandidate b) {
  const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
  if (a_nan != b_nan) return a_nan;
  if (!a_nan && a.value != b.value) return a.value > b.value;
  return a.index < b.index;
}

}  // namespace

// ids[r] = the first index of row r's largest bf16 value (logits [m][vocab], row stride vocab).
// Each thread scans a strided slice, then a tree over (value, index) pairs in shared memory; the
// order is total, so the result does not depend on the block size.
extern "C" __global__ void argmax(const __nv_bfloat16* logits, int* ids, unsigned m, unsigned vocab) {
  __shared__ float values[1024];
  __shared__ unsigned indices[1024];
  if (blockIdx.x >= m) return;
  const __nv_bfloat16* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  // Loses to every element, -inf included (index above any).
  ArgmaxCandidate best{__uint_as_float(0xff800000u), 0xffffffffu};
  for (unsigned j = threadIdx.x; j < vocab; j += blockDim.x) {
    const ArgmaxCandidate c{metrale::to_f32(row[j]), j};
    if (argmax_before(c, best)) best = c;
  }
  const unsigned tid = threadIdx.x, n = blockDim.x;
  values[tid] = best.value;
  indices[tid] = best.index;
  __syncthreads();
  unsigned span = 1;
  while (span < n) span <<= 1;
  for (unsigned s = span >> 1; s > 0; s >>= 1) {
    if (tid < s && tid + s < n) {
      const ArgmaxCandidate other{values[tid + s], indices[tid + s]};
      if (argmax_before(other, ArgmaxCandidate{values[tid], indices[tid]})) {
        values[tid] = other.value;
        indices[tid] = other.index;
      }
    }
    __syncthreads();
  }
  if (tid == 0) ids[blockIdx.x] = static_cast<int>(indices[0]);
}
