// SPDX-License-Identifier: MIT OR Apache-2.0
// The deltanet module's launch arguments, decoded once for the validators (deltanet_table.cpp) and
// the bodies (deltanet_baseline.cpp, deltanet_chunked.cpp). docs/kernels.md, "Module deltanet":
// per-sequence state slots (slot s at base + s * state_stride floats) and a runs table i32
// [n_runs][3] of (first_row, rows, slot). Internal linkage, as kernels.hpp.
#pragma once

#include "kernels.hpp"
#include "numeric.hpp"

#include <cmath>

namespace metrale::cpu {
namespace {

inline constexpr uint32_t kDeltaChunk = 64;  // delta_rule_chunked: tokens per chunk
inline constexpr uint32_t kMaxDeltaDim = 256;  // k_dim, v_dim
inline constexpr uint32_t kMinDeltaDim = 16;

// One run of the table: the next `rows` tokens of one sequence from row `first`, its state in `slot`.
struct Run {
  uint32_t first, rows, slot;
};
inline Run run_at(const int32_t* runs, uint32_t index) {
  const int32_t* r = runs + size_t{index} * 3;
  return {static_cast<uint32_t>(r[0]), static_cast<uint32_t>(r[1]), static_cast<uint32_t>(r[2])};
}

// conv_silu: x, weight, conv_states, runs, out, then n_runs, channels, kernel_size, state_stride.
struct ConvCall {
  const uint16_t* x;
  const uint16_t* weight;
  float* states;
  const int32_t* runs;
  uint16_t* out;
  uint32_t n_runs, channels, kernel_size, state_stride;
};
inline ConvCall conv_call(const KernelArgs& a) {
  return {arg_ptr<const uint16_t>(a, 0), arg_ptr<const uint16_t>(a, 1), arg_ptr<float>(a, 2),
          arg_ptr<const int32_t>(a, 3),  arg_ptr<uint16_t>(a, 4),       arg_u32(a, 5),
          arg_u32(a, 6),                 arg_u32(a, 7),                 arg_u32(a, 8)};
}

// delta_rule_recurrent and delta_rule_chunked: qkv, a, b, a_log, dt_bias, states, runs, out, then
// n_runs, k_heads, v_heads, k_dim, v_dim, state_stride.
struct DeltaCall {
  const uint16_t* qkv;
  const uint16_t* a;
  const uint16_t* b;
  const float* a_log;
  const float* dt_bias;
  float* states;
  const int32_t* runs;
  uint16_t* out;
  uint32_t n_runs, k_heads, v_heads, k_dim, v_dim, state_stride;
  // qkv's row: q of every key head, then k, then v of every value head.
  size_t qkv_width() const { return 2 * size_t{k_heads} * k_dim + size_t{v_heads} * v_dim; }
  size_t state_floats() const { return size_t{v_heads} * k_dim * v_dim; }
  // Value head h's key head.
  uint32_t key_head(uint32_t h) const { return h / (v_heads / k_heads); }
  // Head h's matrix S [k_dim][v_dim] in slot `slot`.
  float* matrix(uint32_t slot, uint32_t h) const {
    return states + size_t{slot} * state_stride + size_t{h} * k_dim * v_dim;
  }
};
inline DeltaCall delta_call(const KernelArgs& a) {
  return {arg_ptr<const uint16_t>(a, 0), arg_ptr<const uint16_t>(a, 1), arg_ptr<const uint16_t>(a, 2),
          arg_ptr<const float>(a, 3),    arg_ptr<const float>(a, 4),    arg_ptr<float>(a, 5),
          arg_ptr<const int32_t>(a, 6),  arg_ptr<uint16_t>(a, 7),       arg_u32(a, 8),
          arg_u32(a, 9),                 arg_u32(a, 10),                arg_u32(a, 11),
          arg_u32(a, 12),                arg_u32(a, 13)};
}

// ---- per token and value head, in f32 as the contract states them

// softplus(x) = log(1 + e^x), x itself above 20 as torch's.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// g = -exp(a_log[h]) * softplus(a + dt_bias[h]) of token `row`, value head h.
inline float delta_gate(const DeltaCall& c, uint32_t row, uint32_t h) {
  const float x = bf16_to_f32(c.a[size_t{row} * c.v_heads + h]) + c.dt_bias[h];
  return -std::exp(c.a_log[h]) * softplus(x);
}
// beta = bf16(sigmoid(b)) of token `row`, value head h.
inline float delta_beta(const DeltaCall& c, uint32_t row, uint32_t h) {
  return round_to_bf16(sigmoid(bf16_to_f32(c.b[size_t{row} * c.v_heads + h])));
}
// out[i] = in[i] / sqrt(sum in^2 + 1e-6) * scale over n bf16.
inline void l2_normalised(const uint16_t* in, uint32_t n, float scale, float* out) {
  float squares = 0.0f;
  for (uint32_t i = 0; i < n; ++i) {
    out[i] = bf16_to_f32(in[i]);
    squares += out[i] * out[i];
  }
  const float factor = scale / std::sqrt(squares + 1e-6f);
  for (uint32_t i = 0; i < n; ++i) out[i] *= factor;
}
// Token `row`'s q (l2-normalised / sqrt(k_dim)), k (l2-normalised) and v (widened) for value
// head h, each into its own array.
inline void delta_token(const DeltaCall& c, uint32_t row, uint32_t h, float* q, float* k, float* v) {
  const uint16_t* x = c.qkv + size_t{row} * c.qkv_width();
  const size_t kh = c.key_head(h);
  l2_normalised(x + kh * c.k_dim, c.k_dim, 1.0f / std::sqrt(static_cast<float>(c.k_dim)), q);
  l2_normalised(x + (c.k_heads + kh) * c.k_dim, c.k_dim, 1.0f, k);
  const uint16_t* vr = x + 2 * size_t{c.k_heads} * c.k_dim + size_t{h} * c.v_dim;
  for (uint32_t j = 0; j < c.v_dim; ++j) v[j] = bf16_to_f32(vr[j]);
}

// gated_norm: x, z, weight, y, then rows, dim, eps.
struct GatedNormCall {
  const uint16_t* x;
  const uint16_t* z;
  const float* weight;
  uint16_t* y;
  uint32_t rows, dim;
  float eps;
};
inline GatedNormCall gated_norm_call(const KernelArgs& a) {
  return {arg_ptr<const uint16_t>(a, 0), arg_ptr<const uint16_t>(a, 1), arg_ptr<const float>(a, 2),
          arg_ptr<uint16_t>(a, 3),       arg_u32(a, 4),                 arg_u32(a, 5),
          arg_f32(a, 6)};
}

}  // namespace
}  // namespace metrale::cpu
