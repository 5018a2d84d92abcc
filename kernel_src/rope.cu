// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `rope` (docs/kernels.md): the rotary embedding in place on q [t][q_heads][head_dim] and
// k [t][kv_heads][head_dim], transformers' rotate_half form in its bf16 arithmetic: cos and sin
// of the f32 angle inv_freq[i] · position, times `scaling`, rounded to bf16; each product and
// the sum rounded to bf16. Grid (t, 1), one token per block, any 1-D block size.
#include "metrale_common.cuh"

namespace {

constexpr unsigned kMaxHalf = 512;  // head_dim up to 1024

__device__ __forceinline__ float rounded(float v) { return metrale::to_f32(metrale::to_bf16(v)); }

}  // namespace

extern "C" __global__ void rope(__nv_bfloat16* q, __nv_bfloat16* k, const int* positions, const float* inv_freq,
                                unsigned t, unsigned q_heads, unsigned kv_heads, unsigned head_dim, float scaling) {
  if (head_dim == 0 || head_dim % 2 != 0 || head_dim / 2 > kMaxHalf) __trap();
  const unsigned token = blockIdx.x;
  if (token >= t) return;
  __shared__ float cosines[kMaxHalf], sines[kMaxHalf];
  const unsigned half = head_dim / 2;
  const float position = static_cast<float>(positions[token]);
  for (unsigned i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = inv_freq[i] * position;
    cosines[i] = rounded(cosf(angle) * scaling);
    sines[i] = rounded(sinf(angle) * scaling);
  }
  __syncthreads();
  const unsigned pairs = (q_heads + kv_heads) * half;
  for (unsigned p = threadIdx.x; p < pairs; p += blockDim.x) {
    const unsigned head = p / half, i = p % half;
    __nv_bfloat16* x = head < q_heads ? q + (static_cast<size_t>(token) * q_heads + head) * head_dim
                                      : k + (static_cast<size_t>(token) * kv_heads + head - q_heads) * head_dim;
    const float a = metrale::to_f32(x[i]), b = metrale::to_f32(x[i + half]);
    x[i] = metrale::to_bf16(rounded(a * cosines[i]) + rounded(-b * sines[i]));
    x[i + half] = metrale::to_bf16(rounded(b * cosines[i]) + rounded(a * sines[i]));
  }
}
