// SPDX-License-Identifier: MIT OR Apache-2.0
// Helpers shared by every kernel source: bf16/f16 conversion, reductions, and the exact decoding
// of quantized codes (integer codes minus a zero point, E4M3 bytes) to f32.
// Compiled by NVRTC with -std=c++17.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace metrale {

constexpr unsigned kGroup = 128;  // K elements per scale

// std::conditional, which NVRTC's headers do not offer.
template <bool B, class T, class F>
struct Select {
  using type = T;
};
template <class T, class F>
struct Select<false, T, F> {
  using type = F;
};

__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ __nv_bfloat16 to_bf16(float v) { return __float2bfloat16_rn(v); }

// The two bf16 halves of a 32-bit word, low half first.
__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
// Two f32 rounded to a bf16 pair (nearest, ties to even), `lo` in the low half.
__device__ __forceinline__ unsigned bf16_pair(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&pair);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// An OCP E4M3 byte (low 8 bits of b) as f32, exactly: the exponent and mantissa bits moved to
// f32's places (a value 2^120 too small, an f32 subnormal when the E4M3 one is), then scaled;
// 0x7f / 0xff are NaN. Needs no FP8 hardware.
__device__ __forceinline__ float e4m3_to_f32(unsigned b) {
  if ((b & 0x7fu) == 0x7fu) return __uint_as_float(0x7fc00000u);
  return __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7fu) << 20)) * 0x1p120f;
}

// (q - z) as f32, exactly, for a code q < 2^23: 2^23 + q is an f32 with q in its mantissa, and
// zf = 2^23 + z; one logic op and one add instead of an int-to-float conversion.
__device__ __forceinline__ float code_minus(unsigned q, float zf) { return __uint_as_float(0x4b000000u | q) - zf; }
__device__ __forceinline__ float code_offset(int z) { return 8388608.f + static_cast<float>(z); }

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


// σ(v) = 1 / (1 + e^−v) and silu(v) = v · σ(v) as v / (1 + e^−v), in f32.
__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + expf(-v)); }
__device__ __forceinline__ float silu(float v) { return v / (1.f + expf(-v)); }

// Σ row[j]² over n bf16 values in f32, in an order that does not depend on the block size:
// lane L (of kOrderedLanes) sums j = L, L + kOrderedLanes, ... in turn, then a fixed tree over the
// lanes. Every thread gets the sum. `lanes` holds kOrderedLanes floats; ends with a barrier.
constexpr unsigned kOrderedLanes = 256;
__device__ inline float ordered_sum_squares(const __nv_bfloat16* row, unsigned n, float* lanes) {
  for (unsigned lane = threadIdx.x; lane < kOrderedLanes; lane += blockDim.x) {
    float sum = 0.f;
    for (unsigned j = lane; j < n; j += kOrderedLanes) {
      const float v = to_f32(row[j]);
      sum += v * v;
    }
    lanes[lane] = sum;
  }
  __syncthreads();
  for (unsigned s = kOrderedLanes / 2; s > 0; s >>= 1) {
    for (unsigned lane = threadIdx.x; lane < s; lane += blockDim.x) lanes[lane] += lanes[lane + s];
    __syncthreads();
  }
  const float total = lanes[0];
  __syncthreads();  // lanes may be reused right after
  return total;
}

}  // namespace metrale
