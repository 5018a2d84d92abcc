// SPDX-License-Identifier: MIT OR Apache-2.0
// Baseline bodies of the decoder's small kernels (docs/kernels.md, modules norm and rope), with
// the rounding points of transformers' bf16 modules: RMSNorm normalises in f32 and rounds to bf16
// before the weight multiplies; rotary cos/sin are f32, rounded to bf16, and every product and
// the sum of q·cos + rotate_half(q)·sin round to bf16. Arguments were validated at launch.
#include "kernels.hpp"
#include "numeric.hpp"

#include <cmath>

namespace metrale::cpu::baseline {
namespace {

inline float round_bf16(float value) { return bf16_to_f32(f32_to_bf16(value)); }

// 1 / sqrt(mean(s^2) + eps) over one row, in f32 (16 partial sums, as router_gemm: the compiler
// keeps them in vector registers).
float inverse_rms(const uint16_t* row, uint32_t h, float eps) {
  constexpr uint32_t kLanes = 16;
  float part[kLanes] = {};
  uint32_t j = 0;
  for (; j + kLanes <= h; j += kLanes)
    for (uint32_t l = 0; l < kLanes; ++l) {
      const float v = bf16_to_f32(row[j + l]);
      part[l] += v * v;
    }
  for (; j < h; ++j) {
    const float v = bf16_to_f32(row[j]);
    part[j % kLanes] += v * v;
  }
  for (uint32_t width = kLanes / 2; width > 0; width /= 2)
    for (uint32_t l = 0; l < width; ++l) part[l] += part[l + width];
  return 1.0f / std::sqrt(part[0] / static_cast<float>(h) + eps);
}

// y = bf16(weight * bf16(s * inverse_rms)); y may be `row` itself (each element is read first).
void normalise(const uint16_t* row, const uint16_t* weight, uint16_t* y, uint32_t h, float eps) {
  const float scale = inverse_rms(row, h, eps);
  for (uint32_t j = 0; j < h; ++j)
    y[j] = f32_to_bf16(bf16_to_f32(weight[j]) * round_bf16(bf16_to_f32(row[j]) * scale));
}

// sum = bf16(x + residual), elementwise; sum may be x or residual.
void add_rows(const uint16_t* x, const uint16_t* residual, uint16_t* sum, size_t count) {
  for (size_t j = 0; j < count; ++j) sum[j] = f32_to_bf16(bf16_to_f32(x[j]) + bf16_to_f32(residual[j]));
}

// One head in place: the first and second halves pair up (transformers' rotate_half).
void rotate(uint16_t* head, const float* cosines, const float* sines, uint32_t half) {
  for (uint32_t i = 0; i < half; ++i) {
    const float a = bf16_to_f32(head[i]), b = bf16_to_f32(head[i + half]);
    head[i] = f32_to_bf16(round_bf16(a * cosines[i]) + round_bf16(-b * sines[i]));
    head[i + half] = f32_to_bf16(round_bf16(b * cosines[i]) + round_bf16(a * sines[i]));
  }
}

}  // namespace

// (x, weight, y, m, h, eps): row `bx`.
void rms_norm(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const uint32_t h = arg_u32(args, 4);
  const size_t row = size_t{bx} * h;
  normalise(arg_ptr<const uint16_t>(args, 0) + row, arg_ptr<const uint16_t>(args, 1), arg_ptr<uint16_t>(args, 2) + row,
            h, arg_f32(args, 5));
}

// (x, residual, weight, y, residual_out, m, h, eps): row `bx`; residual_out = bf16(x + residual)
// is written first and normalised from there, so either output may be one of the inputs.
void rms_norm_residual(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const uint32_t h = arg_u32(args, 6);
  const size_t row = size_t{bx} * h;
  const uint16_t* x = arg_ptr<const uint16_t>(args, 0) + row;
  const uint16_t* residual = arg_ptr<const uint16_t>(args, 1) + row;
  uint16_t* sum = arg_ptr<uint16_t>(args, 4) + row;
  add_rows(x, residual, sum, h);
  normalise(sum, arg_ptr<const uint16_t>(args, 2), arg_ptr<uint16_t>(args, 3) + row, h, arg_f32(args, 7));
}

// (x, residual, out, m, h): row `bx` of out = bf16(x + residual), rms_norm_residual's first half
// (the layers' fallback when a backend lacks the fused kernel).
void add(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const size_t row = size_t{bx} * arg_u32(args, 4);
  add_rows(arg_ptr<const uint16_t>(args, 0) + row, arg_ptr<const uint16_t>(args, 1) + row, arg_ptr<uint16_t>(args, 2) + row,
           arg_u32(args, 4));
}

// (x, bias, out, m, n): row `bx` of out = bf16(x + bias), a Linear layer's bias; out may be x.
void bias_add(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const uint32_t n = arg_u32(args, 4);
  const size_t row = size_t{bx} * n;
  add_rows(arg_ptr<const uint16_t>(args, 0) + row, arg_ptr<const uint16_t>(args, 1), arg_ptr<uint16_t>(args, 2) + row, n);
}

// (q, k, positions, inv_freq, t, q_heads, kv_heads, head_dim, scaling): token `bx`, every head of
// q and of k. The angle is the f32 product inv_freq[i] · position; cos and sin are taken in f32,
// multiplied by `scaling` and rounded to bf16, as transformers hands them to the attention.
void rope(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char* scratch) {
  const uint32_t q_heads = arg_u32(args, 5), kv_heads = arg_u32(args, 6), head_dim = arg_u32(args, 7);
  const uint32_t half = head_dim / 2;
  const float scaling = arg_f32(args, 8);
  const auto position = static_cast<float>(arg_ptr<const int32_t>(args, 2)[bx]);
  const float* inv_freq = arg_ptr<const float>(args, 3);
  float* cosines = scratch_at<float>(scratch, 0);
  float* sines = cosines + kMaxHeadDim / 2;
  for (uint32_t i = 0; i < half; ++i) {
    const float angle = inv_freq[i] * position;
    cosines[i] = round_bf16(std::cos(angle) * scaling);
    sines[i] = round_bf16(std::sin(angle) * scaling);
  }
  uint16_t* q = arg_ptr<uint16_t>(args, 0) + size_t{bx} * q_heads * head_dim;
  uint16_t* k = arg_ptr<uint16_t>(args, 1) + size_t{bx} * kv_heads * head_dim;
  for (uint32_t hd = 0; hd < q_heads; ++hd) rotate(q + size_t{hd} * head_dim, cosines, sines, half);
  for (uint32_t hd = 0; hd < kv_heads; ++hd) rotate(k + size_t{hd} * head_dim, cosines, sines, half);
}

}  // namespace metrale::cpu::baseline
