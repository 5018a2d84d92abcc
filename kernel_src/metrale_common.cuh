// SPDX-License-Identifier: MIT OR Apache-2.0
// Helpers shared by every kernel source: bf16/f16 conversion, reductions, and the W4A16 code
// unpacking of docs/kernels.md (codes packed 8 per u32 along K, lowest nibble first, value
// (q - 8) * scale, one f16 scale per 128 K). Compiled by NVRTC with -std=c++17.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace metrale {

constexpr unsigned kGroup = 128;  // K elements per scale

__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ __nv_bfloat16 to_bf16(float v) { return __float2bfloat16_rn(v); }

// The two bf16 halves of a 32-bit word, low half first.
__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over one packed word: x holds 8 bf16 (4 words) for K positions k..k+7, w the 8 codes.
__device__ __forceinline__ float dot8(const uint4& x, unsigned w) {
  const unsigned xs[4] = {x.x, x.y, x.z, x.w};
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int q0 = static_cast<int>((w >> (8 * i)) & 0xfu) - 8;
    const int q1 = static_cast<int>((w >> (8 * i + 4)) & 0xfu) - 8;
    sum = fmaf(bf16_lo(xs[i]), static_cast<float>(q0), sum);
    sum = fmaf(bf16_hi(xs[i]), static_cast<float>(q1), sum);
  }
  return sum;
}

// Block-wide reduction for any block size (<= 1024): `scratch` holds blockDim.x values.
template <class Op>
__device__ float block_reduce(float v, float* scratch, Op op) {
  const unsigned tid = threadIdx.x;
  const unsigned n = blockDim.x;
  scratch[tid] = v;
  __syncthreads();
  unsigned span = 1;
  while (span < n) span <<= 1;
  for (unsigned s = span >> 1; s > 0; s >>= 1) {
    if (tid < s && tid + s < n) scratch[tid] = op(scratch[tid], scratch[tid + s]);
    __syncthreads();
  }
  const float result = scratch[0];
  __syncthreads();  // scratch may be reused right after
  return result;
}

}  // namespace metrale
