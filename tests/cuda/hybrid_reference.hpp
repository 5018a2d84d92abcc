// SPDX-License-Identifier: MIT OR Apache-2.0
// The contracts of the Gated DeltaNet's kernels (docs/kernels.md, module deltanet) written once
// more for the CUDA tests, independently of kernel_src/: the causal conv with the contract's
// rounding points, the delta rule token by token in double precision (a kernel agrees within a
// tolerance), the runs table. The elementwise kernels' contracts (norm/rms_norm_zero_centred,
// attn/output_gate, deltanet/gated_norm) are decoder_mirror's. Used by the host-emulation tests
// (tests/cuda) and the GPU suite (tests/gpu).
#pragma once

#include "decoder_mirror.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace hybrid_reference {

// The bf16 helpers and the elementwise kernels' contracts are decoder_mirror's (tests/support),
// which the CPU tests hold their kernels to as well.
using decoder_mirror::bf16_value;
using decoder_mirror::gated_norm;
using decoder_mirror::output_gate;
using decoder_mirror::rms_norm_zero_centred;
using decoder_mirror::rounded;
using decoder_mirror::to_bf16;

inline float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

// bf16 values uniform in [lo, hi).
inline std::vector<uint16_t> uniform_bf16(size_t count, float lo, float hi, uint64_t stream) {
  std::mt19937_64 rng(stream);
  std::uniform_real_distribution<float> pick(lo, hi);
  std::vector<uint16_t> out(count);
  for (auto& v : out) v = to_bf16(pick(rng));
  return out;
}
inline std::vector<float> uniform_f32(size_t count, float lo, float hi, uint64_t stream) {
  std::mt19937_64 rng(stream);
  std::uniform_real_distribution<float> pick(lo, hi);
  std::vector<float> out(count);
  for (auto& v : out) v = pick(rng);
  return out;
}
// bf16 multiples of 1/8 in [lo/8, hi/8].
inline std::vector<uint16_t> eighths(size_t count, int lo, int hi, uint64_t stream) {
  std::mt19937_64 rng(stream);
  std::uniform_int_distribution<int> pick(lo, hi);
  std::vector<uint16_t> out(count);
  for (auto& v : out) v = to_bf16(static_cast<float>(pick(rng)) / 8.0f);
  return out;
}

// (first_row, rows, slot) per run, as the kernels read them (i32 [n][3]).
struct Run {
  int32_t first, rows, slot;
};
inline std::vector<int32_t> runs_table(const std::vector<Run>& runs) {
  std::vector<int32_t> out;
  for (const Run& r : runs) out.insert(out.end(), {r.first, r.rows, r.slot});
  return out;
}

// ---- elementwise kernels: f32 with the contract's rounding points ----

// conv_silu over the runs: outputs of the runs' rows (others left as in `out`) and each named
// slot's window updated in `conv_states` (slot s at s · state_stride). Sums in double: exact for
// eighths of small magnitude, as the kernel's f32 sums are.
inline void conv_silu(const std::vector<uint16_t>& x, const std::vector<uint16_t>& weight, std::vector<float>& conv_states,
                      const std::vector<Run>& runs, std::vector<uint16_t>& out, uint32_t channels, uint32_t kernel_size,
                      uint32_t state_stride) {
  const uint32_t taps = kernel_size - 1;
  for (const Run& run : runs) {
    float* window = conv_states.data() + size_t(run.slot) * state_stride;
    for (uint32_t c = 0; c < channels; ++c) {
      // The inputs in time order: the window, then the run's.
      std::vector<double> in;
      for (uint32_t j = 0; j < taps; ++j) in.push_back(window[size_t{j} * channels + c]);
      for (int32_t t = 0; t < run.rows; ++t) in.push_back(bf16_value(x[(size_t(run.first) + t) * channels + c]));
      for (int32_t t = 0; t < run.rows; ++t) {
        double y = 0;
        for (uint32_t j = 0; j < kernel_size; ++j) y += double(bf16_value(weight[size_t{c} * kernel_size + j])) * in[t + j];
        out[(size_t(run.first) + t) * channels + c] = to_bf16(silu(rounded(static_cast<float>(y))));
      }
      for (uint32_t j = 0; j < taps; ++j) window[size_t{j} * channels + c] = static_cast<float>(in[run.rows + j]);
    }
  }
}

// ---- the gated delta rule, token by token in double ----

struct DeltaShape {
  uint32_t k_heads, v_heads, k_dim, v_dim;
  size_t width() const { return 2 * size_t{k_heads} * k_dim + size_t{v_heads} * v_dim; }
  size_t state_floats() const { return size_t{v_heads} * k_dim * v_dim; }
};

struct DeltaInputs {
  DeltaShape shape;
  std::vector<uint16_t> qkv, a, b;     // bf16 [M][width], [M][v_heads] twice
  std::vector<float> a_log, dt_bias;   // [v_heads]
};

// The outputs (double [M][v_heads][v_dim]; rows outside the runs 0) and, in `states` (slot s's
// S [v_heads][k_dim][v_dim] at base + s · state_stride), the named slots' states after their runs.
inline std::vector<double> delta_rule(const DeltaInputs& in, std::vector<double>& states, const std::vector<Run>& runs,
                                      size_t state_stride, size_t base = 0) {
  const DeltaShape& s = in.shape;
  const size_t rows = in.a.size() / s.v_heads, width = s.width();
  std::vector<double> out(rows * s.v_heads * s.v_dim, 0.0);
  std::vector<double> q(s.k_dim), k(s.k_dim), u(s.v_dim);
  for (const Run& run : runs) {
    for (int32_t t = 0; t < run.rows; ++t) {
      const size_t row = size_t(run.first) + t;
      for (uint32_t h = 0; h < s.v_heads; ++h) {
        const uint32_t kh = h / (s.v_heads / s.k_heads);
        double qq = 0, kk = 0;
        for (uint32_t i = 0; i < s.k_dim; ++i) {
          q[i] = bf16_value(in.qkv[row * width + size_t{kh} * s.k_dim + i]);
          k[i] = bf16_value(in.qkv[row * width + size_t(s.k_heads + kh) * s.k_dim + i]);
          qq += q[i] * q[i];
          kk += k[i] * k[i];
        }
        for (uint32_t i = 0; i < s.k_dim; ++i) {
          q[i] = q[i] / std::sqrt(qq + 1e-6) / std::sqrt(double(s.k_dim));
          k[i] = k[i] / std::sqrt(kk + 1e-6);
        }
        const double x = double(bf16_value(in.a[row * s.v_heads + h])) + in.dt_bias[h];
        const double g = -std::exp(double(in.a_log[h])) * (x > 20 ? x : std::log1p(std::exp(x))), decay = std::exp(g);
        const double beta = rounded(sigmoid(bf16_value(in.b[row * s.v_heads + h])));  // σ in f32, then bf16
        double* S = states.data() + base + size_t(run.slot) * state_stride + size_t{h} * s.k_dim * s.v_dim;
        for (uint32_t j = 0; j < s.v_dim; ++j) {
          double kv = 0;
          for (uint32_t i = 0; i < s.k_dim; ++i) kv += S[i * s.v_dim + j] * decay * k[i];
          u[j] = beta * (bf16_value(in.qkv[row * width + 2 * size_t{s.k_heads} * s.k_dim + size_t{h} * s.v_dim + j]) - kv);
        }
        for (uint32_t j = 0; j < s.v_dim; ++j) {
          double o = 0;
          for (uint32_t i = 0; i < s.k_dim; ++i) {
            S[i * s.v_dim + j] = S[i * s.v_dim + j] * decay + k[i] * u[j];
            o += S[i * s.v_dim + j] * q[i];
          }
          out[(row * s.v_heads + h) * s.v_dim + j] = o;
        }
      }
    }
  }
  return out;
}

// Inputs for the delta rule over `rows` rows: q, k, v bf16 in [-1, 1); a in [-3, 3) with every
// 17th row at 24 (softplus's linear branch); b in [-4, 4); a_log in [-2, 0.5); dt_bias in [-1, 1).
inline DeltaInputs delta_inputs(const DeltaShape& shape, size_t rows, uint64_t stream) {
  DeltaInputs in;
  in.shape = shape;
  in.qkv = uniform_bf16(rows * shape.width(), -1.0f, 1.0f, stream);
  in.a = uniform_bf16(rows * shape.v_heads, -3.0f, 3.0f, stream + 1);
  for (size_t r = 0; r < rows; r += 17) in.a[r * shape.v_heads] = to_bf16(24.0f);
  in.b = uniform_bf16(rows * shape.v_heads, -4.0f, 4.0f, stream + 2);
  in.a_log = uniform_f32(shape.v_heads, -2.0f, 0.5f, stream + 3);
  in.dt_bias = uniform_f32(shape.v_heads, -1.0f, 1.0f, stream + 4);
  return in;
}

// Worst |got − want| of a run's outputs relative to its bound: per (row, head),
// |got − want| ≤ 2⁻⁸ |want| + 2⁻¹² max|want of the head over the run| + 1e−6. Returns the largest
// ratio of error to bound (≤ 1 passes; infinite where an output is NaN).
inline double worst_ratio(const std::vector<uint16_t>& got, const std::vector<double>& want, const DeltaShape& s,
                          const std::vector<Run>& runs) {
  double worst = 0;
  for (const Run& run : runs) {
    for (uint32_t h = 0; h < s.v_heads; ++h) {
      double top = 0;
      for (int32_t t = 0; t < run.rows; ++t)
        for (uint32_t j = 0; j < s.v_dim; ++j)
          top = std::max(top, std::fabs(want[((size_t(run.first) + t) * s.v_heads + h) * s.v_dim + j]));
      for (int32_t t = 0; t < run.rows; ++t)
        for (uint32_t j = 0; j < s.v_dim; ++j) {
          const size_t at = ((size_t(run.first) + t) * s.v_heads + h) * s.v_dim + j;
          const double bound = std::ldexp(std::fabs(want[at]), -8) + std::ldexp(top, -12) + 1e-6;
          const double ratio = std::fabs(double(bf16_value(got[at])) - want[at]) / bound;
          worst = std::isnan(ratio) ? HUGE_VAL : std::max(worst, ratio);  // an output not written (NaN) fails
        }
    }
  }
  return worst;
}

}  // namespace hybrid_reference
