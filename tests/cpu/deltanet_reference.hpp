// SPDX-License-Identifier: MIT OR Apache-2.0
// Double-precision references for the deltanet module (docs/kernels.md, "Module deltanet"),
// written for the tests only from the contract text, sharing nothing with the plugin: the causal
// convolution with SiLU and the gated delta rule token by token, with the contract's bf16
// rounding points (bf16 of the convolution's sum, of beta, of every output) and everything else
// in double. Problems: activations of M rows, several runs with distinct slots out of order, rows
// between runs that no run names, nonzero initial states.
#pragma once

#include "support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace cpu_test {

inline double bf16_rounded(double v) { return bf16_value(to_bf16(v)); }

// A runs table i32 [n][3] over rows laid out in order with a gap of `gap` rows after each run,
// slots given; returns the rows it needs.
inline uint32_t lay_runs(const std::vector<uint32_t>& lengths, const std::vector<uint32_t>& slots, uint32_t gap,
                         std::vector<int32_t>& runs) {
  uint32_t row = gap;
  runs.clear();
  for (size_t i = 0; i < lengths.size(); ++i) {
    runs.insert(runs.end(), {static_cast<int32_t>(row), static_cast<int32_t>(lengths[i]), static_cast<int32_t>(slots[i])});
    row += lengths[i] + gap;
  }
  return row;
}

// ---- conv_silu

struct ConvProblem {
  uint32_t rows = 0, channels = 0, taps = 0, slots = 0, stride = 0;
  std::vector<uint16_t> x, weight;  // bf16 [rows][channels], [channels][taps]
  std::vector<float> states;        // [slots][stride], each slot's window first
  std::vector<int32_t> runs;
};

// out (double, after the contract's roundings) for every row a run names, and the states after.
struct ConvResult {
  std::vector<double> out;  // [rows][channels]; rows no run names: NaN
  std::vector<float> states;
};

inline ConvResult conv_reference(const ConvProblem& p) {
  ConvResult r{std::vector<double>(size_t{p.rows} * p.channels, std::nan("")), p.states};
  const uint32_t k = p.taps, c = p.channels;
  for (size_t i = 0; i < p.runs.size() / 3; ++i) {
    const auto first = static_cast<uint32_t>(p.runs[3 * i]), rows = static_cast<uint32_t>(p.runs[3 * i + 1]);
    float* window = r.states.data() + size_t(p.runs[3 * i + 2]) * p.stride;
    // The run's inputs preceded by the window: in[0, k - 1) the window, then the rows.
    std::vector<double> in(size_t{k - 1 + rows} * c);
    for (size_t e = 0; e < size_t{k - 1} * c; ++e) in[e] = window[e];
    for (uint32_t t = 0; t < rows; ++t)
      for (uint32_t ch = 0; ch < c; ++ch) in[size_t{k - 1 + t} * c + ch] = bf16_value(p.x[size_t{first + t} * c + ch]);
    for (uint32_t t = 0; t < rows; ++t)
      for (uint32_t ch = 0; ch < c; ++ch) {
        double y = 0;
        for (uint32_t j = 0; j < k; ++j) y += bf16_value(p.weight[size_t{ch} * k + j]) * in[size_t{t + j} * c + ch];
        const double v = bf16_rounded(y);
        r.out[size_t{first + t} * c + ch] = bf16_rounded(v / (1 + std::exp(-v)));
      }
    for (size_t e = 0; e < size_t{k - 1} * c; ++e) window[e] = static_cast<float>(in[size_t{rows} * c + e]);
  }
  return r;
}

// ---- the gated delta rule

struct DeltaProblem {
  uint32_t rows = 0, k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0, slots = 0, stride = 0;
  std::vector<uint16_t> qkv, a, b;  // bf16 [rows][2 k_heads k_dim + v_heads v_dim], [rows][v_heads] twice
  std::vector<float> a_log, dt_bias;  // [v_heads]
  std::vector<float> states;          // [slots][stride]: S [v_heads][k_dim][v_dim] from each slot's start
  std::vector<int32_t> runs;
  size_t width() const { return 2 * size_t{k_heads} * k_dim + size_t{v_heads} * v_dim; }
};

struct DeltaResult {
  std::vector<double> out;     // [rows][v_heads][v_dim], bf16-rounded; rows no run names: NaN
  std::vector<double> states;  // [slots][stride]
};

// x / sqrt(sum x^2 + 1e-6) * scale of n bf16.
inline std::vector<double> l2_reference(const uint16_t* x, uint32_t n, double scale) {
  std::vector<double> v(n);
  double squares = 0;
  for (uint32_t i = 0; i < n; ++i) v[i] = bf16_value(x[i]), squares += v[i] * v[i];
  for (double& e : v) e *= scale / std::sqrt(squares + 1e-6);
  return v;
}

// One token of value head h over S [k_dim][v_dim] (double): the contract's five steps.
inline void delta_step(const DeltaProblem& p, uint32_t row, uint32_t h, double* s, double* out) {
  const uint32_t kd = p.k_dim, vd = p.v_dim, kh = h / (p.v_heads / p.k_heads);
  const uint16_t* x = p.qkv.data() + size_t{row} * p.width();
  const std::vector<double> q = l2_reference(x + size_t{kh} * kd, kd, 1 / std::sqrt(double(kd)));
  const std::vector<double> k = l2_reference(x + size_t{p.k_heads + kh} * kd, kd, 1);
  const uint16_t* v = x + 2 * size_t{p.k_heads} * kd + size_t{h} * vd;
  const double sp = bf16_value(p.a[size_t{row} * p.v_heads + h]) + p.dt_bias[h];
  const double g = -std::exp(double(p.a_log[h])) * (sp > 20 ? sp : std::log1p(std::exp(sp)));
  const double beta = bf16_rounded(1 / (1 + std::exp(-bf16_value(p.b[size_t{row} * p.v_heads + h]))));
  for (size_t e = 0; e < size_t{kd} * vd; ++e) s[e] *= std::exp(g);
  std::vector<double> u(vd);
  for (uint32_t j = 0; j < vd; ++j) {
    double sk = 0;
    for (uint32_t i = 0; i < kd; ++i) sk += s[size_t{i} * vd + j] * k[i];
    u[j] = beta * (bf16_value(v[j]) - sk);
  }
  for (uint32_t i = 0; i < kd; ++i)
    for (uint32_t j = 0; j < vd; ++j) s[size_t{i} * vd + j] += k[i] * u[j];
  for (uint32_t j = 0; j < vd; ++j) {
    double o = 0;
    for (uint32_t i = 0; i < kd; ++i) o += s[size_t{i} * vd + j] * q[i];
    out[j] = bf16_rounded(o);
  }
}

inline DeltaResult delta_reference(const DeltaProblem& p) {
  DeltaResult r{std::vector<double>(size_t{p.rows} * p.v_heads * p.v_dim, std::nan("")),
                std::vector<double>(p.states.begin(), p.states.end())};
  const size_t matrix = size_t{p.k_dim} * p.v_dim;
  for (size_t i = 0; i < p.runs.size() / 3; ++i) {
    const auto first = static_cast<uint32_t>(p.runs[3 * i]), rows = static_cast<uint32_t>(p.runs[3 * i + 1]);
    double* slot = r.states.data() + size_t(p.runs[3 * i + 2]) * p.stride;
    for (uint32_t h = 0; h < p.v_heads; ++h)
      for (uint32_t t = 0; t < rows; ++t)
        delta_step(p, first + t, h, slot + h * matrix, r.out.data() + (size_t{first + t} * p.v_heads + h) * p.v_dim);
  }
  return r;
}

// Inputs: activations in (-1, 1), a in (-2, 2), b in (-3, 3), dt_bias in (-1, 1); a_log per head
// from `decays` (cycled): -8 keeps a state for thousands of tokens, 1 forgets in a few.
// Runs of `lengths` tokens in slots `run_slots` of `slots`, one row between runs (lay_runs).
inline DeltaProblem delta_problem(const std::vector<uint32_t>& lengths, const std::vector<uint32_t>& run_slots,
                                  uint32_t k_heads, uint32_t v_heads, uint32_t dim, uint32_t slots, uint64_t seed,
                                  const std::vector<float>& decays = {-4.0f, -1.0f, -8.0f, 0.5f}) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  DeltaProblem p;
  const uint32_t rows = lay_runs(lengths, run_slots, 1, p.runs);
  p.rows = rows, p.k_heads = k_heads, p.v_heads = v_heads, p.k_dim = dim, p.v_dim = dim, p.slots = slots;
  p.stride = v_heads * dim * dim + 40;  // a slot holds more than the matrices (the window, in the layers)
  const auto bf16s = [&](size_t count, double amplitude) {
    std::vector<uint16_t> v(count);
    for (auto& e : v) e = to_bf16(amplitude * unit(rng));
    return v;
  };
  p.qkv = bf16s(rows * p.width(), 1.0);
  p.a = bf16s(size_t{rows} * v_heads, 2.0);
  p.b = bf16s(size_t{rows} * v_heads, 3.0);
  for (uint32_t h = 0; h < v_heads; ++h) {
    p.a_log.push_back(decays[h % decays.size()]);
    p.dt_bias.push_back(static_cast<float>(unit(rng)));
  }
  p.states.resize(size_t{slots} * p.stride);
  for (auto& e : p.states) e = static_cast<float>(0.25 * unit(rng));
  return p;
}

}  // namespace cpu_test
