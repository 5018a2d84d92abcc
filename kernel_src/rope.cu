// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `rope` (docs/kernels.md): the rotary embedding in place on q [t][q_heads][head_dim] and
// k [t][kv_heads][head_dim], transformers' rotate_half form in its bf16 arithmetic: cos and sin
// of the f32 angle inv_freq[i] · position, times `scaling`, rounded to bf16; each product and
// the sum rounded to bf16. qk_norm_rope first normalises every head row as norm/rms_norm does.
// Grid (t, 1), one token per block, any 1-D block size.
#include "metrale_common.cuh"

namespace {

constexpr unsigned kMaxHalf = 512;  // head_dim up to 1024
// qk_norm_rope: the squares of the head rows in flight, each row padded with zeros to a power
// of two (16 KiB: 32 rows of 128, 4 of 1024).
constexpr unsigned kSquares = 4096;

__device__ __forceinline__ float rounded(float v) { return metrale::to_f32(metrale::to_bf16(v)); }

__device__ __forceinline__ void check_head_dim(unsigned head_dim) {
  if (head_dim == 0 || head_dim % 2 != 0 || head_dim / 2 > kMaxHalf) __trap();
}

// The token's bf16 cos and sin into shared memory, then a barrier.
__device__ void rotary_table(const float* inv_freq, int position, float scaling, unsigned half, float* cosines,
                             float* sines) {
  const float at = static_cast<float>(position);
  for (unsigned i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = inv_freq[i] * at;
    cosines[i] = rounded(cosf(angle) * scaling);
    sines[i] = rounded(sinf(angle) * scaling);
  }
  __syncthreads();
}

// The pair (a, b) = (x[i], x[i + half]) rotated into x[i] and x[i + half].
__device__ __forceinline__ void rotate_pair(float a, float b, float cosine, float sine, __nv_bfloat16* low,
                                            __nv_bfloat16* high) {
  *low = metrale::to_bf16(rounded(a * cosine) + rounded(-b * sine));
  *high = metrale::to_bf16(rounded(b * cosine) + rounded(a * sine));
}

// Head `head` of the token: q's first, then k's.
__device__ __forceinline__ __nv_bfloat16* head_row(__nv_bfloat16* q, __nv_bfloat16* k, unsigned token, unsigned head,
                                                   unsigned q_heads, unsigned kv_heads, unsigned head_dim) {
  return head < q_heads ? q + (static_cast<size_t>(token) * q_heads + head) * head_dim
                        : k + (static_cast<size_t>(token) * kv_heads + head - q_heads) * head_dim;
}

}  // namespace

extern "C" __global__ void rope(__nv_bfloat16* q, __nv_bfloat16* k, const int* positions, const float* inv_freq,
                                unsigned t, unsigned q_heads, unsigned kv_heads, unsigned head_dim, float scaling) {
  check_head_dim(head_dim);
  const unsigned token = blockIdx.x;
  if (token >= t) return;
  __shared__ float cosines[kMaxHalf], sines[kMaxHalf];
  const unsigned half = head_dim / 2;
  rotary_table(inv_freq, positions[token], scaling, half, cosines, sines);
  const unsigned pairs = (q_heads + kv_heads) * half;
  for (unsigned p = threadIdx.x; p < pairs; p += blockDim.x) {
    const unsigned i = p % half;
    __nv_bfloat16* x = head_row(q, k, token, p / half, q_heads, kv_heads, head_dim);
    rotate_pair(metrale::to_f32(x[i]), metrale::to_f32(x[i + half]), cosines[i], sines[i], x + i, x + i + half);
  }
}

// rms_norm of every head row of the token (q's with q_weight, k's with k_weight), then rope. The
// f32 sum of squares of a row is norm/rms_norm's with a block of at least head_dim threads, at
// any block size here: the squares padded with zeros to a power of two `span`, halved pairwise
// (element j plus element j + s) as its block reduction does. The normalised value is the bf16
// rms_norm stores. Writes come after the barriers of the sums; one thread reads and writes a pair.
extern "C" __global__ void qk_norm_rope(__nv_bfloat16* q, __nv_bfloat16* k, const __nv_bfloat16* q_weight,
                                        const __nv_bfloat16* k_weight, const int* positions, const float* inv_freq,
                                        unsigned t, unsigned q_heads, unsigned kv_heads, unsigned head_dim, float eps,
                                        float scaling) {
  check_head_dim(head_dim);
  const unsigned token = blockIdx.x;
  if (token >= t) return;
  __shared__ float cosines[kMaxHalf], sines[kMaxHalf];
  __shared__ float squares[kSquares];
  const unsigned half = head_dim / 2;
  rotary_table(inv_freq, positions[token], scaling, half, cosines, sines);
  unsigned span = 1;
  while (span < head_dim) span <<= 1;
  const unsigned heads = q_heads + kv_heads, rows_per_pass = kSquares / span;
  for (unsigned first = 0; first < heads; first += rows_per_pass) {
    const unsigned rows = min(rows_per_pass, heads - first);
    for (unsigned e = threadIdx.x; e < rows * span; e += blockDim.x) {
      const unsigned j = e % span;
      const __nv_bfloat16* x = head_row(q, k, token, first + e / span, q_heads, kv_heads, head_dim);
      const float v = j < head_dim ? metrale::to_f32(x[j]) : 0.f;
      squares[e] = v * v;
    }
    __syncthreads();
    for (unsigned s = span / 2; s > 0; s /= 2) {
      for (unsigned p = threadIdx.x; p < rows * s; p += blockDim.x) {
        const unsigned at = p / s * span + p % s;
        squares[at] = squares[at] + squares[at + s];
      }
      __syncthreads();
    }
    for (unsigned p = threadIdx.x; p < rows * half; p += blockDim.x) {
      const unsigned row = p / half, i = p % half, head = first + row;
      __nv_bfloat16* x = head_row(q, k, token, head, q_heads, kv_heads, head_dim);
      const __nv_bfloat16* w = head < q_heads ? q_weight : k_weight;
      const float scale = 1.f / sqrtf(squares[row * span] / static_cast<float>(head_dim) + eps);
      const float a = rounded(metrale::to_f32(w[i]) * rounded(metrale::to_f32(x[i]) * scale));
      const float b = rounded(metrale::to_f32(w[i + half]) * rounded(metrale::to_f32(x[i + half]) * scale));
      rotate_pair(a, b, cosines[i], sines[i], x + i, x + i + half);
    }
    __syncthreads();  // the next rows' squares reuse the buffer
  }
}
