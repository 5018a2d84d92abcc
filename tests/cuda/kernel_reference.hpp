// SPDX-License-Identifier: MIT OR Apache-2.0
// Host-side definitions of every CUDA kernel's contract (docs/kernels.md) in double precision,
// test data in the exact device formats (bf16 / f16 bit patterns, packed W4A16 codes), and the
// tolerance check. Shared by the emulated kernel tests (suite cuda) and the GPU suite.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace metrale::reference {

inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) return (sign ? -1.f : 1.f) * std::ldexp(static_cast<float>(mantissa), -24);
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Normal values only (what the generators produce), rounded to nearest even.
inline uint16_t float_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int exponent = static_cast<int>((u >> 23) & 0xffu) - 127 + 15;
  uint32_t mantissa = u & 0x7fffffu;
  if (exponent <= 0) return static_cast<uint16_t>(sign);
  uint32_t half = (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

// A W4A16 weight W[N][K] in the device layout, with its dequantised values for the reference.
struct W4A16Weight {
  uint32_t n = 0, k = 0;
  std::vector<uint32_t> qweight;  // [N][K/8]
  std::vector<uint16_t> scales;   // f16 [N][K/128]
  double value(uint32_t row, uint32_t col) const {
    const uint32_t word = qweight[static_cast<size_t>(row) * (k / 8) + col / 8];
    const int q = static_cast<int>((word >> (4 * (col % 8))) & 0xfu);
    return (q - 8) * static_cast<double>(f16_to_float(scales[static_cast<size_t>(row) * (k / 128) + col / 128]));
  }
};

class Data {
 public:
  explicit Data(uint32_t seed) : rng_(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }
  std::vector<uint16_t> bf16(size_t count, float lo = -1.f, float hi = 1.f) {
    std::vector<uint16_t> out(count);
    for (auto& v : out) v = float_to_bf16(uniform(lo, hi));
    return out;
  }
  std::vector<float> f32(size_t count, float lo, float hi) {
    std::vector<float> out(count);
    for (auto& v : out) v = uniform(lo, hi);
    return out;
  }
  W4A16Weight w4a16(uint32_t n, uint32_t k) {
    W4A16Weight w;
    w.n = n;
    w.k = k;
    w.qweight.resize(static_cast<size_t>(n) * k / 8);
    for (auto& word : w.qweight) word = static_cast<uint32_t>(rng_());
    w.scales.resize(static_cast<size_t>(n) * k / 128);
    for (auto& s : w.scales) s = float_to_f16(uniform(0.002f, 0.03f) * (rng_() % 4 == 0 ? -1.f : 1.f));
    return w;
  }

 private:
  std::mt19937 rng_;
};

// Largest |got - want| allowed: bf16 rounding of the result plus f32 accumulation over `terms`
// products whose magnitudes sum to `magnitude`.
inline double tolerance(double want, double magnitude, size_t terms) {
  return std::ldexp(std::abs(want), -8) * 1.01 + magnitude * 4e-7 * std::sqrt(static_cast<double>(terms) + 1) + 1e-6;
}

// Compares bf16 results with the double reference; "" when all agree, else the first offenders.
struct Comparison {
  size_t checked = 0;
  size_t bad = 0;
  double worst_ratio = 0;  // max |err| / tolerance
  std::string first;
  void add(size_t index, double got, double want, double tol) {
    ++checked;
    const double err = std::abs(got - want);
    worst_ratio = std::max(worst_ratio, err / tol);
    if (!(err <= tol)) {
      if (bad < 5) {
        std::ostringstream s;
        s << " [" << index << "] got " << got << " want " << want << " (tol " << tol << ")";
        first += s.str();
      }
      ++bad;
    }
  }
  bool ok() const { return bad == 0 && checked > 0; }
  std::string report() const {
    return std::to_string(bad) + " of " + std::to_string(checked) + " outside tolerance;" + first;
  }
};

// y = x · Wᵀ for bf16 x [M][K]: checks y (bf16 [M][N]).
inline Comparison check_w4a16(const std::vector<uint16_t>& x, const W4A16Weight& w, uint32_t m,
                              const std::vector<uint16_t>& y) {
  Comparison c;
  std::vector<double> xs(x.size());
  for (size_t i = 0; i < x.size(); ++i) xs[i] = bf16_to_float(x[i]);
  std::vector<double> row(w.k);
  for (uint32_t col = 0; col < w.n; ++col) {
    for (uint32_t kk = 0; kk < w.k; ++kk) row[kk] = w.value(col, kk);  // dequantised once per row
    for (uint32_t r = 0; r < m; ++r) {
      const double* xr = &xs[static_cast<size_t>(r) * w.k];
      double sum = 0, magnitude = 0;
      for (uint32_t kk = 0; kk < w.k; ++kk) {
        const double term = xr[kk] * row[kk];
        sum += term;
        magnitude += std::abs(term);
      }
      c.add(static_cast<size_t>(r) * w.n + col, bf16_to_float(y[static_cast<size_t>(r) * w.n + col]), sum,
            tolerance(sum, magnitude, w.k));
    }
  }
  return c;
}

inline double silu(double g) { return g / (1 + std::exp(-g)); }
inline double gelu_tanh(double g) {
  return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
}

template <class Act>
Comparison check_act(const std::vector<uint16_t>& gate_up, uint32_t m, uint32_t i, const std::vector<uint16_t>& out,
                     Act act) {
  Comparison c;
  for (uint32_t r = 0; r < m; ++r) {
    for (uint32_t j = 0; j < i; ++j) {
      const double g = bf16_to_float(gate_up[static_cast<size_t>(r) * 2 * i + j]);
      const double u = bf16_to_float(gate_up[static_cast<size_t>(r) * 2 * i + i + j]);
      const double want = act(g) * u;
      c.add(static_cast<size_t>(r) * i + j, bf16_to_float(out[static_cast<size_t>(r) * i + j]), want,
            tolerance(want, std::abs(want), 4) + 1e-6 * std::abs(g * u));
    }
  }
  return c;
}

inline Comparison check_router(const std::vector<uint16_t>& x, const std::vector<float>& w, uint32_t m, uint32_t e,
                               uint32_t h, const std::vector<float>& logits) {
  Comparison c;
  for (uint32_t r = 0; r < m; ++r) {
    for (uint32_t ex = 0; ex < e; ++ex) {
      double sum = 0, magnitude = 0;
      for (uint32_t j = 0; j < h; ++j) {
        const double term = bf16_to_float(x[static_cast<size_t>(r) * h + j]) * w[static_cast<size_t>(ex) * h + j];
        sum += term;
        magnitude += std::abs(term);
      }
      // f32 output: no bf16 rounding, only accumulation error.
      c.add(static_cast<size_t>(r) * e + ex, logits[static_cast<size_t>(r) * e + ex], sum,
            magnitude * 4e-7 * std::sqrt(h + 1.0) + 1e-6);
    }
  }
  return c;
}

// The expected top-k of one row: (id, weight) in descending probability, ties by lower id.
inline std::vector<std::pair<int, double>> topk_row(const float* logits, uint32_t e, uint32_t k, bool renormalize) {
  double max_logit = -INFINITY;
  for (uint32_t j = 0; j < e; ++j) max_logit = std::max(max_logit, static_cast<double>(logits[j]));
  double sum = 0;
  for (uint32_t j = 0; j < e; ++j) sum += std::exp(logits[j] - max_logit);
  std::vector<std::pair<int, double>> all;
  for (uint32_t j = 0; j < e; ++j) all.emplace_back(static_cast<int>(j), std::exp(logits[j] - max_logit) / sum);
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  all.resize(k);
  if (renormalize) {
    double total = 0;
    for (const auto& p : all) total += p.second;
    for (auto& p : all) p.second /= total;
  }
  return all;
}

}  // namespace metrale::reference
