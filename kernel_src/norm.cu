// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `norm` (docs/kernels.md): RMSNorm with the rounding points of transformers' bf16
// Qwen3RMSNorm / LlamaRMSNorm: statistics in f32, the normalised row rounded to bf16 before the
// weight multiplies; the zero-centred RMSNorm of Qwen3.5 / Qwen3-Next (the weight stored as the
// offset from 1, nothing rounded before it); and the bf16 adds beside it (the residual stream's, a
// Linear layer's bias). Grid (m, 1), one row per block, any 1-D block size up to 1024.
#include "metrale_common.cuh"

namespace {

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// y[j] = bf16(weight[j] · bf16(row[j] / sqrt(mean(row²) + eps))). Each thread writes only the
// elements it read, after the barrier of the reduction: y may be `row` itself.
__device__ void normalise(const __nv_bfloat16* row, const __nv_bfloat16* __restrict__ weight, __nv_bfloat16* y,
                          unsigned h, float eps) {
  __shared__ float scratch[1024];
  float squares = 0.f;
  for (unsigned j = threadIdx.x; j < h; j += blockDim.x) {
    const float v = metrale::to_f32(row[j]);
    squares += v * v;
  }
  const float total = metrale::block_reduce(squares, scratch, Add{});
  const float scale = 1.f / sqrtf(total / static_cast<float>(h) + eps);
  for (unsigned j = threadIdx.x; j < h; j += blockDim.x) {
    const float normalised = metrale::to_f32(metrale::to_bf16(metrale::to_f32(row[j]) * scale));
    y[j] = metrale::to_bf16(metrale::to_f32(weight[j]) * normalised);
  }
}

}  // namespace

extern "C" __global__ void rms_norm(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* y, unsigned m,
                                    unsigned h, float eps) {
  if (blockIdx.x >= m) return;
  const size_t row = static_cast<size_t>(blockIdx.x) * h;
  normalise(x + row, weight, y + row, h, eps);
}

// sum = bf16(x + residual) over one row, each thread its own elements: sum may be x or residual.
__device__ void add_row(const __nv_bfloat16* x, const __nv_bfloat16* residual, __nv_bfloat16* sum, unsigned h) {
  for (unsigned j = threadIdx.x; j < h; j += blockDim.x)
    sum[j] = metrale::to_bf16(metrale::to_f32(x[j]) + metrale::to_f32(residual[j]));
}

// residual_out = bf16(x + residual), then y = rms_norm(residual_out): each thread sums, stores
// and later normalises the same elements, so either output may be one of the inputs.
extern "C" __global__ void rms_norm_residual(const __nv_bfloat16* x, const __nv_bfloat16* residual,
                                             const __nv_bfloat16* weight, __nv_bfloat16* y,
                                             __nv_bfloat16* residual_out, unsigned m, unsigned h, float eps) {
  if (blockIdx.x >= m) return;
  const size_t row = static_cast<size_t>(blockIdx.x) * h;
  add_row(x + row, residual + row, residual_out + row, h);
  normalise(residual_out + row, weight, y + row, h, eps);
}

// rms_norm_residual's first half alone (the layers' fallback). Grid (m, 1).
extern "C" __global__ void add(const __nv_bfloat16* x, const __nv_bfloat16* residual, __nv_bfloat16* out, unsigned m,
                               unsigned h) {
  if (blockIdx.x >= m) return;
  const size_t row = static_cast<size_t>(blockIdx.x) * h;
  add_row(x + row, residual + row, out + row, h);
}

// A Linear layer's bias over the projection's bf16 output: out = bf16(x + bias) per row, the
// same bias row for every row; out may be x. Grid (m, 1).
extern "C" __global__ void bias_add(const __nv_bfloat16* x, const __nv_bfloat16* bias, __nv_bfloat16* out, unsigned m,
                                    unsigned n) {
  if (blockIdx.x >= m) return;
  const size_t row = static_cast<size_t>(blockIdx.x) * n;
  add_row(x + row, bias, out + row, n);
}

// y = bf16(x · s · (1 + weight[j])) per row, s = 1 / sqrt(Σ x² / h + eps), all in f32 with no
// rounding of the normalised row (transformers' Qwen3NextRMSNorm). The sum of squares in fixed
// lanes (metrale::ordered_sum_squares): the same bits at any block size. y may be x: each thread
// writes only what it read after the reduction. Grid (m, 1).
extern "C" __global__ void rms_norm_zero_centred(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* y,
                                                 unsigned m, unsigned h, float eps) {
  __shared__ float lanes[metrale::kOrderedLanes];
  if (blockIdx.x >= m) return;
  const size_t row = static_cast<size_t>(blockIdx.x) * h;
  const float total = metrale::ordered_sum_squares(x + row, h, lanes);
  const float scale = 1.f / sqrtf(total / static_cast<float>(h) + eps);
  for (unsigned j = threadIdx.x; j < h; j += blockDim.x)
    y[row + j] = metrale::to_bf16(metrale::to_f32(x[row + j]) * scale * (1.f + metrale::to_f32(weight[j])));
}
