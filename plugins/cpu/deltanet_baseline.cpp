// SPDX-License-Identifier: MIT OR Apache-2.0
// Baseline bodies of the deltanet module (docs/kernels.md, "Module deltanet") but the chunked
// delta rule (deltanet_chunked.cpp): the causal convolution with SiLU, the gated delta rule token
// by token, the gated RMSNorm. All in f32 with the contract's bf16 rounding points. Arguments
// were validated at launch (deltanet_table.cpp): runs inside the activations, slots inside the
// state allocation, no two runs sharing rows or a slot.
#include "deltanet_calls.hpp"
#include "kernels.hpp"
#include "numeric.hpp"

#include <cmath>

namespace metrale::cpu::baseline {
namespace {

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

// The run's input at position p (negative: the window, -1 its newest entry), row of `channels`.
struct ConvInputs {
  const ConvCall& c;
  const float* window;  // [K - 1][channels], oldest first
  uint32_t first;
  float at(int64_t p, uint32_t channel) const {
    if (p < 0) return window[static_cast<size_t>(static_cast<int64_t>(c.kernel_size) - 1 + p) * c.channels + channel];
    return bf16_to_f32(c.x[(size_t{first} + static_cast<size_t>(p)) * c.channels + channel]);
  }
};

}  // namespace

// Block (bx, 1): run bx, every channel, token by token; then its window becomes the run's last
// K - 1 inputs (older window entries where the run is shorter), written in place from the oldest
// on: entry i takes the input at rows - (K - 1) + i, a later window entry or a row of x.
void conv_silu(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const ConvCall c = conv_call(args);
  const Run run = run_at(c.runs, bx);
  const uint32_t taps = c.kernel_size;
  float* window = c.states + size_t{run.slot} * c.state_stride;
  const ConvInputs in{c, window, run.first};
  for (uint32_t t = 0; t < run.rows; ++t) {
    uint16_t* out = c.out + (size_t{run.first} + t) * c.channels;
    for (uint32_t ch = 0; ch < c.channels; ++ch) {
      const uint16_t* w = c.weight + size_t{ch} * taps;
      float y = 0.0f;
      for (uint32_t j = 0; j < taps; ++j)
        y += bf16_to_f32(w[j]) * in.at(static_cast<int64_t>(t) - taps + 1 + j, ch);
      out[ch] = f32_to_bf16(silu(round_to_bf16(y)));
    }
  }
  for (uint32_t i = 0; i + 1 < taps; ++i) {
    const int64_t p = static_cast<int64_t>(run.rows) - (taps - 1) + i;
    for (uint32_t ch = 0; ch < c.channels; ++ch) window[size_t{i} * c.channels + ch] = in.at(p, ch);
  }
}

// Block (bx, by): run bx, value head by, token by token over its matrix S [k_dim][v_dim] in the
// slot: S <- S e^g and u = beta (v - S^T k) in one pass, then S <- S + k (x) u and o = S^T q in
// a second. Scratch: q, k [k_dim], v, u, o [v_dim] f32.
void delta_rule_recurrent(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  const DeltaCall c = delta_call(args);
  const Run run = run_at(c.runs, bx);
  const uint32_t kd = c.k_dim, vd = c.v_dim;
  float* s = c.matrix(run.slot, by);
  float* q = scratch_at<float>(scratch, 0);
  float* k = q + kd;
  float* v = k + kd;
  float* u = v + vd;
  float* o = u + vd;
  for (uint32_t t = 0; t < run.rows; ++t) {
    const uint32_t row = run.first + t;
    delta_token(c, row, by, q, k, v);
    const float decay = std::exp(delta_gate(c, row, by)), beta = delta_beta(c, row, by);
    for (uint32_t j = 0; j < vd; ++j) u[j] = 0.0f, o[j] = 0.0f;
    for (uint32_t i = 0; i < kd; ++i) {
      float* si = s + size_t{i} * vd;
      const float ki = k[i];
      for (uint32_t j = 0; j < vd; ++j) {
        si[j] *= decay;
        u[j] += si[j] * ki;
      }
    }
    for (uint32_t j = 0; j < vd; ++j) u[j] = beta * (v[j] - u[j]);
    for (uint32_t i = 0; i < kd; ++i) {
      float* si = s + size_t{i} * vd;
      const float ki = k[i], qi = q[i];
      for (uint32_t j = 0; j < vd; ++j) {
        si[j] += ki * u[j];
        o[j] += si[j] * qi;
      }
    }
    uint16_t* out = c.out + (size_t{row} * c.v_heads + by) * vd;
    for (uint32_t j = 0; j < vd; ++j) out[j] = f32_to_bf16(o[j]);
  }
}

// Block (bx, 1): row bx, y = bf16(weight * bf16(x * s) * silu(z)), s = 1 / sqrt(mean(x^2) + eps);
// y may be x (each element is read before it is written).
void gated_norm(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const GatedNormCall c = gated_norm_call(args);
  const size_t at = size_t{bx} * c.dim;
  const uint16_t* x = c.x + at;
  const uint16_t* z = c.z + at;
  float squares = 0.0f;
  for (uint32_t j = 0; j < c.dim; ++j) squares += bf16_to_f32(x[j]) * bf16_to_f32(x[j]);
  const float scale = 1.0f / std::sqrt(squares / static_cast<float>(c.dim) + c.eps);
  for (uint32_t j = 0; j < c.dim; ++j) {
    const float n = round_to_bf16(bf16_to_f32(x[j]) * scale);
    c.y[at + j] = f32_to_bf16(c.weight[j] * n * silu(bf16_to_f32(z[j])));
  }
}

}  // namespace metrale::cpu::baseline
