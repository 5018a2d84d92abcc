// SPDX-License-Identifier: MIT OR Apache-2.0
#include "reference/decoder_reference.hpp"

#include "core/numeric.hpp"

#include <cmath>

namespace metrale::layers {

namespace {

double bf16(double value) { return bf16_to_f32(f64_to_bf16(value)); }

ReferenceOutput sized(uint32_t m, uint32_t n) {
  ReferenceOutput out;
  out.m = m;
  out.n = n;
  out.value.resize(size_t{m} * n);
  out.bound.resize(size_t{m} * n);
  out.row_excluded.assign(m, 0);
  return out;
}

// Row r of `rows` normalised into `out` (values already rounded where the contract rounds).
void normalise(std::span<const double> rows, std::span<const uint16_t> weight, uint32_t r, uint32_t h, double eps,
               ReferenceOutput& out) {
  const double* row = rows.data() + size_t{r} * h;
  double squares = 0;
  for (uint32_t j = 0; j < h; ++j) squares += row[j] * row[j];
  const double scale = 1.0 / std::sqrt(squares / h + eps);
  for (uint32_t j = 0; j < h; ++j) {
    const double normalised = bf16(row[j] * scale);
    const double w = bf16_to_f32(weight[j]);
    const size_t at = size_t{r} * h + j;
    out.value[at] = w * normalised;
    out.bound[at] = std::fabs(w) * bf16_ulp(normalised) + 2 * bf16_ulp(out.value[at]);
  }
}

std::vector<double> widen(std::span<const uint16_t> x) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_f32(x[i]);
  return out;
}

// rope of [t][heads][head_dim] values, each known within `input_bound` of the kernel's: the
// rotation carries that uncertainty through cos and sin into the output's bound.
ReferenceOutput rotated(std::span<const double> x, std::span<const double> input_bound, std::span<const int32_t> positions,
                        std::span<const float> inv_freq, uint32_t t, uint32_t heads, uint32_t head_dim, float scaling) {
  const uint32_t half = head_dim / 2;
  ReferenceOutput out = sized(t * heads, head_dim);
  for (uint32_t r = 0; r < t; ++r) {
    for (uint32_t i = 0; i < half; ++i) {
      // The angle is the contract's f32 product (the double product of two floats is exact).
      const double angle = static_cast<float>(double{inv_freq[i]} * static_cast<float>(positions[r]));
      const double c = bf16(std::cos(angle) * scaling), s = bf16(std::sin(angle) * scaling);
      for (uint32_t hd = 0; hd < heads; ++hd) {
        const size_t base = (size_t{r} * heads + hd) * head_dim;
        const double a = x[base + i], b = x[base + i + half];
        const double da = input_bound[base + i], db = input_bound[base + i + half];
        const double terms[2][2] = {{a * c, -b * s}, {b * c, a * s}};
        for (uint32_t side = 0; side < 2; ++side) {
          const size_t at = base + i + side * half;
          const double p = bf16(terms[side][0]), q = bf16(terms[side][1]);
          out.value[at] = p + q;
          // cos and sin may round the other way in f32; so may each product; the inputs may be
          // off by their bounds.
          const double x_c = side == 0 ? a : b, x_s = side == 0 ? b : a;
          const double d_c = side == 0 ? da : db, d_s = side == 0 ? db : da;
          out.bound[at] = (std::fabs(x_c) + d_c) * bf16_ulp(c) + (std::fabs(x_s) + d_s) * bf16_ulp(s) +
                          std::fabs(c) * d_c + std::fabs(s) * d_s + bf16_ulp(p) + bf16_ulp(q) +
                          2 * bf16_ulp(out.value[at]);
        }
      }
    }
  }
  return out;
}

}  // namespace

ReferenceOutput reference_rms_norm(std::span<const uint16_t> x, std::span<const uint16_t> weight, uint32_t m,
                                   uint32_t h, double eps) {
  ReferenceOutput out = sized(m, h);
  const std::vector<double> rows = widen(x);
  for (uint32_t r = 0; r < m; ++r) normalise(rows, weight, r, h, eps, out);
  return out;
}

ReferenceResidualNorm reference_rms_norm_residual(std::span<const uint16_t> x, std::span<const uint16_t> residual,
                                                  std::span<const uint16_t> weight, uint32_t m, uint32_t h,
                                                  double eps) {
  ReferenceResidualNorm out{sized(m, h), sized(m, h)};
  std::vector<double> sums(size_t{m} * h);
  for (size_t i = 0; i < sums.size(); ++i) {
    sums[i] = bf16(double{bf16_to_f32(x[i])} + bf16_to_f32(residual[i]));  // the exact sum, rounded once
    out.residual_out.value[i] = sums[i];
  }
  for (uint32_t r = 0; r < m; ++r) normalise(sums, weight, r, h, eps, out.y);
  return out;
}

ReferenceOutput reference_bias_add(std::span<const uint16_t> x, std::span<const uint16_t> bias, uint32_t m, uint32_t n) {
  ReferenceOutput out = sized(m, n);
  for (uint32_t r = 0; r < m; ++r)
    for (uint32_t j = 0; j < n; ++j) {
      const size_t at = size_t{r} * n + j;
      out.value[at] = bf16(double{bf16_to_f32(x[at])} + bf16_to_f32(bias[j]));  // the exact sum, rounded once
    }
  return out;
}

ReferenceOutput reference_rope(std::span<const uint16_t> x, std::span<const int32_t> positions,
                               std::span<const float> inv_freq, uint32_t t, uint32_t heads, uint32_t head_dim,
                               float scaling) {
  const std::vector<double> zero(x.size(), 0.0);
  return rotated(widen(x), zero, positions, inv_freq, t, heads, head_dim, scaling);
}

ReferenceOutput reference_qk_norm_rope(std::span<const uint16_t> x, std::span<const uint16_t> weight,
                                      std::span<const int32_t> positions, std::span<const float> inv_freq, uint32_t t,
                                      uint32_t heads, uint32_t head_dim, double eps, float scaling) {
  const ReferenceOutput normalised = reference_rms_norm(x, weight, t * heads, head_dim, eps);
  // rope reads the normalised rows as the bf16 values rms_norm stores.
  std::vector<double> rows(normalised.value.size()), bounds(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = bf16(normalised.value[i]);
    bounds[i] = normalised.bound[i] + bf16_ulp(rows[i]) / 2;
  }
  return rotated(rows, bounds, positions, inv_freq, t, heads, head_dim, scaling);
}

}  // namespace metrale::layers
