// SPDX-License-Identifier: MIT OR Apache-2.0
// Host-side definitions of the quantized weight families of docs/kernels.md ("Quantized weight
// families beyond W4A16", "Plain 16-bit float weights") in double precision: test data in the
// canonical layouts (w4-zp, w8-zp, fp8-e4m3, bf16-nk, f16-nk; zero points, FP8 special values,
// f16 subnormals included), E4M3 by table search, the expected
// outputs of the bf16-, int8- and E4M3-activation GEMMs, the activation quantizers, the
// act-order gather and device-side routing. Shared by the emulated kernel tests and the GPU suite.
#pragma once

#include "kernel_reference.hpp"

#include <array>
#include <limits>

namespace metrale::reference {

// E4M3 ("e4m3fn"): value of a byte (NaN for 0x7f, 0xff), straight from the definition.
inline double e4m3_value(uint32_t code) {
  const uint32_t e = (code >> 3) & 0xfu;
  const uint32_t m = code & 7u;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = e == 0 ? m / 512.0 : (1 + m / 8.0) * std::ldexp(1.0, static_cast<int>(e) - 7);
  return (code & 0x80u) ? -magnitude : magnitude;
}

// The E4M3 byte nearest to v by search over every finite code, ties to the even code,
// saturating at ±448, keeping v's sign (a negative v that rounds to zero gives 0x80, a NaN 0xff).
inline uint8_t e4m3_nearest(float v) {
  if (std::isnan(v)) return std::signbit(v) ? 0xff : 0x7f;
  const double a = std::min(std::abs(static_cast<double>(v)), 448.0);
  uint32_t best = 0;
  for (uint32_t c = 1; c < 0x7f; ++c) {
    const double d = std::abs(e4m3_value(c) - a);
    const double best_d = std::abs(e4m3_value(best) - a);
    if (d < best_d || (d == best_d && (c & 1u) == 0)) best = c;
  }
  return static_cast<uint8_t>(best | (std::signbit(v) ? 0x80u : 0u));
}

// bf16 and f16: plain 16-bit weights (modules bf16, f16), the values themselves.
enum class QuantKind { w4zp, w8zp, fp8, bf16, f16 };

inline bool plain16(QuantKind kind) { return kind == QuantKind::bf16 || kind == QuantKind::f16; }

// A stack of `count` matrices [N][K] in a family's canonical layout.
struct QuantMatrix {
  QuantKind kind = QuantKind::w4zp;
  uint32_t n = 0, k = 0, group = 128, count = 1;
  std::vector<uint32_t> words;  // the code bytes (w4: two codes a byte, low nibble first; 16-bit: little-endian)
  std::vector<float> scales;    // [count][N][K/G]; none for bf16 / f16
  std::vector<uint8_t> zeros;   // [count][N][K/G], w4zp and w8zp

  uint32_t groups() const { return k / group; }
  size_t row_bytes() const { return kind == QuantKind::w4zp ? k / 2 : plain16(kind) ? size_t{k} * 2 : k; }
  const uint8_t* bytes() const { return reinterpret_cast<const uint8_t*>(words.data()); }
  uint32_t code(uint32_t e, uint32_t row, uint32_t col) const {
    const uint8_t* r = bytes() + (static_cast<size_t>(e) * n + row) * row_bytes();
    if (plain16(kind)) return r[2 * col] | uint32_t{r[2 * col + 1]} << 8;
    const uint8_t byte = r[kind == QuantKind::w4zp ? col / 2 : col];
    return kind == QuantKind::w4zp ? (col % 2 ? byte >> 4 : byte & 0xfu) : byte;
  }
  size_t cell(uint32_t e, uint32_t row, uint32_t col) const {
    return (static_cast<size_t>(e) * n + row) * groups() + col / group;
  }
  int zero(uint32_t e, uint32_t row, uint32_t col) const {
    return kind == QuantKind::w4zp || kind == QuantKind::w8zp ? zeros[cell(e, row, col)] : 0;
  }
  double scale(uint32_t e, uint32_t row, uint32_t col) const { return plain16(kind) ? 1.0 : scales[cell(e, row, col)]; }
  // The unscaled value: q - z, the E4M3 number, or the bf16 / f16 number.
  double unscaled(uint32_t e, uint32_t row, uint32_t col) const {
    const uint32_t q = code(e, row, col);
    switch (kind) {
      case QuantKind::fp8: return e4m3_value(q);
      case QuantKind::bf16: return bf16_to_float(static_cast<uint16_t>(q));
      case QuantKind::f16: return f16_to_float(static_cast<uint16_t>(q));
      default: return static_cast<double>(static_cast<int>(q) - zero(e, row, col));
    }
  }
  double value(uint32_t e, uint32_t row, uint32_t col) const { return unscaled(e, row, col) * scale(e, row, col); }
};

class QuantData : public Data {
 public:
  explicit QuantData(uint32_t seed) : Data(seed), rng_(seed * 2654435761u + 1) {}
  uint32_t below(uint32_t bound) { return static_cast<uint32_t>(rng_() % bound); }

  // Codes uniform; zero points drawn from `zero_choices` per group; scales of either sign.
  // bf16 / f16 values: see plain_values.
  QuantMatrix weights(QuantKind kind, uint32_t n, uint32_t k, uint32_t group, uint32_t count,
                      std::vector<uint8_t> zero_choices = {}) {
    QuantMatrix w;
    w.kind = kind;
    w.n = n;
    w.k = k;
    w.group = kind == QuantKind::w4zp || kind == QuantKind::w8zp ? group : 128;
    w.count = count;
    const size_t bytes = static_cast<size_t>(count) * n * w.row_bytes();
    w.words.resize(bytes / 4);
    if (plain16(kind)) {
      plain_values(w);
      return w;
    }
    for (auto& word : w.words) word = static_cast<uint32_t>(rng_());
    const size_t cells = static_cast<size_t>(count) * n * w.groups();
    w.scales.resize(cells);
    for (auto& s : w.scales) s = uniform(0.002f, 0.03f) * (below(4) == 0 ? -1.f : 1.f);
    if (kind == QuantKind::fp8) {
      auto* b = reinterpret_cast<uint8_t*>(w.words.data());
      for (size_t i = 0; i < bytes; ++i) {
        if ((b[i] & 0x7fu) == 0x7fu) b[i] ^= 0x01u;  // finite; specials are placed by the tests
      }
    } else {
      if (zero_choices.empty()) zero_choices = kind == QuantKind::w4zp ? std::vector<uint8_t>{0, 8, 15, 16}
                                                                       : std::vector<uint8_t>{0, 128, 255};
      w.zeros.resize(cells);
      for (auto& z : w.zeros) z = zero_choices[below(static_cast<uint32_t>(zero_choices.size()))];
    }
    return w;
  }
  // bf16 uniform in [-1, 1); f16 with every mantissa bit, magnitudes 2^-14 .. 2 (bf16 could not
  // hold them). Planted in every row: large values (bf16 128 and -255, f16 ±255.9), tiny ones
  // (bf16 ±2^-100; the f16 subnormals 2^-24 and -(2^-14 - 2^-24)) and -0.
  void plain_values(QuantMatrix& w) {
    auto* v = reinterpret_cast<uint16_t*>(w.words.data());
    const size_t rows = static_cast<size_t>(w.count) * w.n;
    for (size_t i = 0; i < rows * w.k; ++i) {
      v[i] = w.kind == QuantKind::bf16
                 ? float_to_bf16(uniform(-1.f, 1.f))
                 : static_cast<uint16_t>((rng_() & 0x8000u) | (1 + rng_() % 15) << 10 | (rng_() & 0x3ffu));
    }
    static constexpr uint16_t kBf16[] = {0x4300, 0xc37f, 0x0d80, 0x8d80, 0x8000};
    static constexpr uint16_t kF16[] = {0x5bff, 0xdbff, 0x0001, 0x83ff, 0x8000};
    const uint16_t* specials = w.kind == QuantKind::bf16 ? kBf16 : kF16;
    for (size_t row = 0; row < rows; ++row) {
      for (size_t i = 0; i < std::size(kF16); ++i) v[row * w.k + below(w.k)] = specials[i];
    }
  }
  // Int8 activations in -127..127 and positive row scales.
  std::vector<uint8_t> int8(size_t count) {
    std::vector<uint8_t> out(count);
    for (auto& v : out) v = static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(below(255)) - 127));
    return out;
  }
  // Finite E4M3 bytes, subnormals and ±448 among them.
  std::vector<uint8_t> e4m3(size_t count) {
    std::vector<uint8_t> out(count);
    for (auto& v : out) {
      v = static_cast<uint8_t>(below(256));
      if ((v & 0x7fu) == 0x7fu) v = static_cast<uint8_t>(v ^ 0x01u);
    }
    return out;
  }

 private:
  std::mt19937 rng_;
};

// NaN-aware comparison: a NaN expectation is met by a NaN result.
inline void compare(Comparison& c, size_t index, double got, double want, double tol) {
  if (std::isnan(want) && std::isnan(got)) {
    c.add(index, 0, 0, 1);
    return;
  }
  c.add(index, got, want, tol);
}

// y = x · W_eᵀ for bf16 x [m][K] against matrix e: checks y (bf16 [m][N]).
inline void check_bf16_rows(Comparison& c, const uint16_t* x, const QuantMatrix& w, uint32_t e, uint32_t m,
                            const uint16_t* y, size_t index_base = 0) {
  std::vector<double> row(w.k);
  for (uint32_t col = 0; col < w.n; ++col) {
    for (uint32_t kk = 0; kk < w.k; ++kk) row[kk] = w.value(e, col, kk);
    for (uint32_t r = 0; r < m; ++r) {
      double sum = 0, magnitude = 0;
      for (uint32_t kk = 0; kk < w.k; ++kk) {
        const double term = bf16_to_float(x[static_cast<size_t>(r) * w.k + kk]) * row[kk];
        sum += term;
        magnitude += std::abs(term);
      }
      const size_t at = static_cast<size_t>(r) * w.n + col;
      compare(c, index_base + at, bf16_to_float(y[at]), sum, tolerance(sum, magnitude, w.k));
    }
  }
}

// y[r][c] = xscale[r] · Σ_g s · Σ_{k∈g} a(xq[r][k]) · unscaled(c, k), with a() the int8 or E4M3
// value of an activation byte. `slack`: relative error allowed on top of f32 accumulation (the
// E4M3 tensor cores of some GPUs accumulate with fewer bits).
// With `group_scales`, xscale is [m][k/128] (fp8_*_a8_group128): each term takes the scale of its
// 128 columns, y[r][c] = Σ_g xscale[r][g] · s · Σ_{k∈g} a(xq[r][k]) · unscaled(c, k).
inline void check_act8_rows(Comparison& c, const uint8_t* xq, const float* xscale, const QuantMatrix& w, uint32_t e,
                            uint32_t m, const uint16_t* y, bool e4m3_activations, double slack = 0,
                            size_t index_base = 0, bool group_scales = false) {
  const uint32_t groups = w.k / 128;
  std::vector<double> a(static_cast<size_t>(m) * w.k);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = e4m3_activations ? e4m3_value(xq[i]) : static_cast<double>(static_cast<int8_t>(xq[i]));
  }
  std::vector<double> row(w.k);
  for (uint32_t col = 0; col < w.n; ++col) {
    for (uint32_t kk = 0; kk < w.k; ++kk) row[kk] = w.value(e, col, kk);  // dequantised once per column
    for (uint32_t r = 0; r < m; ++r) {
      double sum = 0, magnitude = 0;
      for (uint32_t kk = 0; kk < w.k; ++kk) {
        const double term = a[static_cast<size_t>(r) * w.k + kk] * row[kk] *
                            (group_scales ? xscale[static_cast<size_t>(r) * groups + kk / 128] : 1.0);
        sum += term;
        magnitude += std::abs(term);
      }
      if (!group_scales) {
        sum *= xscale[r];
        magnitude *= xscale[r];
      }
      const size_t at = static_cast<size_t>(r) * w.n + col;
      compare(c, index_base + at, bf16_to_float(y[at]), sum, tolerance(sum, magnitude, w.k) + slack * magnitude);
    }
  }
}

// quantize_int8 / quantize_fp8 of one row: the scale and the codes, exactly.
inline float quantize_row(const uint16_t* x, uint32_t k, bool fp8, uint8_t* xq) {
  float a = 0;
  for (uint32_t j = 0; j < k; ++j) a = std::max(a, std::abs(bf16_to_float(x[j])));
  const float sr = a / (fp8 ? 448.f : 127.f);
  for (uint32_t j = 0; j < k; ++j) {
    if (sr == 0) {
      xq[j] = 0;
      continue;
    }
    const float v = bf16_to_float(x[j]) / sr;
    xq[j] = fp8 ? e4m3_nearest(v) : static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(v), -127.f, 127.f)));
  }
  return sr;
}

// moe_align's outputs for ids [m][k].
struct Routing {
  std::vector<int32_t> offsets, rows, slots, active;
  std::vector<float> combine_weights;
};

inline Routing align_routing(const std::vector<int32_t>& ids, const std::vector<float>& topk_weights,
                             const std::vector<float>& shared_logits, uint32_t m, uint32_t e, uint32_t k,
                             uint32_t shared) {
  const uint32_t s = k + (shared ? 1 : 0);
  Routing out;
  out.offsets.assign(e + 1, 0);
  for (const int32_t id : ids) ++out.offsets[id + 1];
  out.active.push_back(0);
  for (uint32_t x = 0; x < e; ++x) {
    if (out.offsets[x + 1] > 0) out.active.push_back(static_cast<int32_t>(x));
    out.offsets[x + 1] += out.offsets[x];
  }
  out.active[0] = static_cast<int32_t>(out.active.size() - 1);
  out.rows.assign(static_cast<size_t>(m) * k, -1);
  out.slots.assign(static_cast<size_t>(m) * s, -1);
  out.combine_weights.assign(static_cast<size_t>(m) * s, 0.f);
  std::vector<int32_t> cursor(out.offsets.begin(), out.offsets.end() - 1);
  for (uint32_t r = 0; r < m; ++r) {  // token, then choice
    for (uint32_t j = 0; j < k; ++j) {
      const int32_t pos = cursor[ids[r * k + j]]++;
      out.rows[pos] = static_cast<int32_t>(r);
      out.slots[r * s + j] = pos;
      out.combine_weights[r * s + j] = topk_weights[r * k + j];
    }
    if (shared) {
      out.slots[r * s + k] = static_cast<int32_t>(m * k + r);
      out.combine_weights[r * s + k] =
          shared == 1 ? 1.f : static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(shared_logits[r]))));
    }
  }
  return out;
}

}  // namespace metrale::reference
