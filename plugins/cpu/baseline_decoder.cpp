// SPDX-License-Identifier: MIT OR Apache-2.0
// Baseline bodies of the decoder's small kernels (docs/kernels.md, modules norm, rope, sample, and
// attn's output_gate), with
// the rounding points of transformers' bf16 modules: RMSNorm normalises in f32 and rounds to bf16
// before the weight multiplies; rotary cos/sin are f32, rounded to bf16, and every product and
// the sum of q·cos + rotate_half(q)·sin round to bf16. Arguments were validated at launch.
#include "kernels.hpp"
#include "numeric.hpp"
#include "rotary.hpp"

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

// weight · bf16(x · scale) in f32, before the output's rounding to bf16.
inline float weighted(uint16_t x, uint16_t weight, float scale) {
  return bf16_to_f32(weight) * round_bf16(bf16_to_f32(x) * scale);
}

// y = bf16(weight * bf16(s * inverse_rms)); y may be `row` itself (each element is read first).
void normalise(const uint16_t* row, const uint16_t* weight, uint16_t* y, uint32_t h, float eps) {
  const float scale = inverse_rms(row, h, eps);
  for (uint32_t j = 0; j < h; ++j) y[j] = f32_to_bf16(weighted(row[j], weight[j], scale));
}

// sum = bf16(x + residual), elementwise; sum may be x or residual.
void add_rows(const uint16_t* x, const uint16_t* residual, uint16_t* sum, size_t count) {
  for (size_t j = 0; j < count; ++j) sum[j] = f32_to_bf16(bf16_to_f32(x[j]) + bf16_to_f32(residual[j]));
}

// The pair (a, b) = (x[i], x[i + half]) rotated into `low` and `high` (transformers' rotate_half).
inline void rotate_pair(float a, float b, float cosine, float sine, uint16_t& low, uint16_t& high) {
  low = f32_to_bf16(round_bf16(a * cosine) + round_bf16(-b * sine));
  high = f32_to_bf16(round_bf16(b * cosine) + round_bf16(a * sine));
}

// One head in place: the first and second halves pair up.
void rotate(uint16_t* head, const float* cosines, const float* sines, uint32_t half) {
  for (uint32_t i = 0; i < half; ++i)
    rotate_pair(bf16_to_f32(head[i]), bf16_to_f32(head[i + half]), cosines[i], sines[i], head[i], head[i + half]);
}

// One head in place, rms_norm's row then rope's rotation: the row normalised into a local array
// (the bf16 values rms_norm would store), then rotated from there and stored: two plain loops
// (one loop over the pairs ran at about half the speed of rms_norm then rope).
void normalise_rotate(uint16_t* head, const uint16_t* weight, const float* cosines, const float* sines, uint32_t half,
                      float eps) {
  const float scale = inverse_rms(head, 2 * half, eps);
  float normalised[kMaxHeadDim];
  for (uint32_t j = 0; j < 2 * half; ++j) normalised[j] = round_bf16(weighted(head[j], weight[j], scale));
  for (uint32_t i = 0; i < half; ++i)
    rotate_pair(normalised[i], normalised[i + half], cosines[i], sines[i], head[i], head[i + half]);
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
// q and of k.
void rope(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char* scratch) {
  const uint32_t q_heads = arg_u32(args, 5), kv_heads = arg_u32(args, 6), head_dim = arg_u32(args, 7);
  const uint32_t half = head_dim / 2;
  const Rotary r = rotary(arg_ptr<const float>(args, 3), arg_ptr<const int32_t>(args, 2)[bx], arg_f32(args, 8), half, scratch);
  uint16_t* q = arg_ptr<uint16_t>(args, 0) + size_t{bx} * q_heads * head_dim;
  uint16_t* k = arg_ptr<uint16_t>(args, 1) + size_t{bx} * kv_heads * head_dim;
  for (uint32_t hd = 0; hd < q_heads; ++hd) rotate(q + size_t{hd} * head_dim, r.cosines, r.sines, half);
  for (uint32_t hd = 0; hd < kv_heads; ++hd) rotate(k + size_t{hd} * head_dim, r.cosines, r.sines, half);
}

// (q, k, q_weight, k_weight, positions, inv_freq, t, q_heads, kv_heads, head_dim, eps, scaling):
// token `bx`, every head of q and of k normalised and rotated; the bits of rms_norm on each head
// row (the same inverse_rms) followed by rope.
void qk_norm_rope(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char* scratch) {
  qk_norm_rope_token(args, bx, scratch, normalise_rotate);
}

// (x, weight, y, m, h, eps): row `bx` of the zero-centred RMSNorm, y = bf16(x * s * (1 + weight))
// in f32 (no rounding of the normalised row); y may be x.
void rms_norm_zero_centred(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const uint32_t h = arg_u32(args, 4);
  const size_t at = size_t{bx} * h;
  const uint16_t* x = arg_ptr<const uint16_t>(args, 0) + at;
  const uint16_t* weight = arg_ptr<const uint16_t>(args, 1);
  uint16_t* y = arg_ptr<uint16_t>(args, 2) + at;
  const float scale = inverse_rms(x, h, arg_f32(args, 5));
  for (uint32_t j = 0; j < h; ++j) y[j] = f32_to_bf16(bf16_to_f32(x[j]) * scale * (1.0f + bf16_to_f32(weight[j])));
}

// (x, gate, out, m, n): row `bx`, out = bf16(x * bf16(1 / (1 + e^-gate))); out may be x.
void output_gate(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const uint32_t n = arg_u32(args, 4);
  const size_t at = size_t{bx} * n;
  const uint16_t* x = arg_ptr<const uint16_t>(args, 0) + at;
  const uint16_t* gate = arg_ptr<const uint16_t>(args, 1) + at;
  uint16_t* out = arg_ptr<uint16_t>(args, 2) + at;
  for (uint32_t j = 0; j < n; ++j) {
    const float sigma = round_bf16(1.0f / (1.0f + std::exp(-bf16_to_f32(gate[j]))));
    out[j] = f32_to_bf16(bf16_to_f32(x[j]) * sigma);
  }
}

// (logits, ids, m, vocab): ids[bx] = the first index of row bx's largest value, torch.argmax's
// choice: NaN above every number (the first NaN ends the scan), ties to the lower index.
void argmax(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const uint32_t vocab = arg_u32(args, 3);
  const uint16_t* row = arg_ptr<const uint16_t>(args, 0) + size_t{bx} * vocab;
  uint32_t best = 0;
  float top = bf16_to_f32(row[0]);
  for (uint32_t j = 1; j < vocab && !std::isnan(top); ++j) {
    const float v = bf16_to_f32(row[j]);
    if (v > top || std::isnan(v)) {
      top = v;
      best = j;
    }
  }
  arg_ptr<int32_t>(args, 1)[bx] = static_cast<int32_t>(best);
}

}  // namespace metrale::cpu::baseline
