// SPDX-License-Identifier: MIT OR Apache-2.0
// The contracts of the decoder's small kernels (docs/kernels.md, modules norm, rope, sample, attn's
// output_gate and deltanet's gated_norm) written
// once more in plain f32 for the backends' tests, independently of any backend's code, with the
// inputs that make them exact: rows of multiples of 1/8, whose sums of squares are exact in f32
// in any order, so a kernel's block reduction and this loop agree bit for bit and every bf16
// rounding point shows. cos/sin are the host's (the CPU backend's and the emulation's). The adds
// reduce nothing, so they agree on any inputs; `spread` makes their sums round.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace decoder_mirror {

inline float bf16_value(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

// Nearest bf16 of a finite float, ties to even.
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float rounded(float f) { return bf16_value(to_bf16(f)); }

// bf16 multiples of 1/8 in [-4, 4).
inline std::vector<uint16_t> eighths(size_t count, uint64_t stream) {
  std::mt19937_64 rng(stream);
  std::uniform_int_distribution<int> pick(-32, 31);
  std::vector<uint16_t> out(count);
  for (auto& v : out) v = to_bf16(static_cast<float>(pick(rng)) / 8.0f);
  return out;
}

// bf16 of random mantissas and signs, magnitudes 2^-12..2^12: sums of two round at every
// exponent gap, ties included.
inline std::vector<uint16_t> spread(size_t count, uint64_t stream) {
  std::mt19937_64 rng(stream);
  std::uniform_int_distribution<int> exponent(-12, 12), mantissa(0, 127), sign(0, 1);
  std::vector<uint16_t> out(count);
  for (auto& v : out)
    v = to_bf16(std::ldexp(static_cast<float>(128 + mantissa(rng)) / 128.0f, exponent(rng)) * (sign(rng) ? -1.0f : 1.0f));
  return out;
}

// Rows of bf16 values in (-1, 1) that are no multiples of 1/8, row r scaled by 2^(3·(r % 7) − 9):
// their sums of squares round in f32, so only the same operations in the same order give the
// same bits (for checks of one kernel against others, not against this mirror).
inline std::vector<uint16_t> scaled_rows(size_t rows, size_t h, uint64_t stream) {
  std::mt19937_64 rng(stream);
  std::uniform_real_distribution<float> pick(-1.0f, 1.0f);
  std::vector<uint16_t> out(rows * h);
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < h; ++j) out[r * h + j] = to_bf16(std::ldexp(pick(rng), static_cast<int>(r % 7) * 3 - 9));
  return out;
}

// Norm weights in [0.25, 1.75).
inline std::vector<uint16_t> norm_weights(size_t count, uint64_t stream) {
  std::mt19937_64 rng(stream);
  std::uniform_real_distribution<float> pick(0.25f, 1.75f);
  std::vector<uint16_t> out(count);
  for (auto& v : out) v = to_bf16(pick(rng));
  return out;
}

// y = bf16(w · bf16(x / sqrt(Σ x² / h + eps))) per row.
inline std::vector<uint16_t> rms_norm(const std::vector<uint16_t>& x, const std::vector<uint16_t>& w, uint32_t m,
                                      uint32_t h, float eps) {
  std::vector<uint16_t> y(x.size());
  for (uint32_t r = 0; r < m; ++r) {
    const uint16_t* row = x.data() + size_t{r} * h;
    float squares = 0;
    for (uint32_t j = 0; j < h; ++j) squares += bf16_value(row[j]) * bf16_value(row[j]);
    const float scale = 1.0f / std::sqrt(squares / static_cast<float>(h) + eps);
    for (uint32_t j = 0; j < h; ++j)
      y[size_t{r} * h + j] = to_bf16(bf16_value(w[j]) * rounded(bf16_value(row[j]) * scale));
  }
  return y;
}

// The zero-centred RMSNorm: y = bf16(x · s · (1 + w)) in f32, s as rms_norm's, no rounding before
// the weight.
inline std::vector<uint16_t> rms_norm_zero_centred(const std::vector<uint16_t>& x, const std::vector<uint16_t>& w,
                                                   uint32_t m, uint32_t h, float eps) {
  std::vector<uint16_t> y(x.size());
  for (uint32_t r = 0; r < m; ++r) {
    const uint16_t* row = x.data() + size_t{r} * h;
    float squares = 0;
    for (uint32_t j = 0; j < h; ++j) squares += bf16_value(row[j]) * bf16_value(row[j]);
    const float scale = 1.0f / std::sqrt(squares / static_cast<float>(h) + eps);
    for (uint32_t j = 0; j < h; ++j) y[size_t{r} * h + j] = to_bf16(bf16_value(row[j]) * scale * (1.0f + bf16_value(w[j])));
  }
  return y;
}

// attn's output gate: bf16(x · bf16(1 / (1 + e^-gate))) elementwise, in f32.
inline std::vector<uint16_t> output_gate(const std::vector<uint16_t>& x, const std::vector<uint16_t>& gate) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = to_bf16(bf16_value(x[i]) * rounded(1.0f / (1.0f + std::exp(-bf16_value(gate[i])))));
  return out;
}

// deltanet's gated RMSNorm per row of `dim`: n = bf16(x · s), y = bf16(w · n · silu(z)), w f32.
inline std::vector<uint16_t> gated_norm(const std::vector<uint16_t>& x, const std::vector<uint16_t>& z,
                                        const std::vector<float>& w, uint32_t rows, uint32_t dim, float eps) {
  std::vector<uint16_t> y(x.size());
  for (uint32_t r = 0; r < rows; ++r) {
    const size_t at = size_t{r} * dim;
    float squares = 0;
    for (uint32_t j = 0; j < dim; ++j) squares += bf16_value(x[at + j]) * bf16_value(x[at + j]);
    const float scale = 1.0f / std::sqrt(squares / static_cast<float>(dim) + eps);
    for (uint32_t j = 0; j < dim; ++j) {
      const float zj = bf16_value(z[at + j]);
      y[at + j] = to_bf16(w[j] * rounded(bf16_value(x[at + j]) * scale) * (zj / (1.0f + std::exp(-zj))));
    }
  }
  return y;
}

// bf16(x + residual) elementwise.
inline std::vector<uint16_t> add(const std::vector<uint16_t>& x, const std::vector<uint16_t>& residual) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_bf16(bf16_value(x[i]) + bf16_value(residual[i]));
  return out;
}

// bf16(x[r][j] + bias[j]) over the rows of x, n wide.
inline std::vector<uint16_t> bias_add(const std::vector<uint16_t>& x, const std::vector<uint16_t>& bias) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_bf16(bf16_value(x[i]) + bf16_value(bias[i % bias.size()]));
  return out;
}

// The default rotary frequencies 1 / theta^(2i / head_dim), i < head_dim / 2.
inline std::vector<float> inv_freq(uint32_t head_dim, double theta) {
  std::vector<float> out(head_dim / 2);
  for (uint32_t i = 0; i < head_dim / 2; ++i) out[i] = static_cast<float>(std::pow(theta, -2.0 * i / head_dim));
  return out;
}

// rope on one [t][heads][head_dim] tensor, returned rotated.
inline std::vector<uint16_t> rope(std::vector<uint16_t> x, const std::vector<int32_t>& positions,
                                  const std::vector<float>& inv_freq, uint32_t heads, uint32_t head_dim, float scaling) {
  const uint32_t half = head_dim / 2;
  for (size_t r = 0; r < positions.size(); ++r)
    for (uint32_t i = 0; i < half; ++i) {
      const float angle = inv_freq[i] * static_cast<float>(positions[r]);
      const float c = rounded(std::cos(angle) * scaling), s = rounded(std::sin(angle) * scaling);
      for (uint32_t hd = 0; hd < heads; ++hd) {
        uint16_t* head = x.data() + (r * heads + hd) * head_dim;
        const float a = bf16_value(head[i]), b = bf16_value(head[i + half]);
        head[i] = to_bf16(rounded(a * c) + rounded(-b * s));
        head[i + half] = to_bf16(rounded(b * c) + rounded(a * s));
      }
    }
  return x;
}

// sample/argmax's rows and the ids torch.argmax gives for them: each row's expected id is
// written by hand for the edge cases (not computed by an argmax), so a kernel and a mirror that
// share a mistake cannot agree on it. `vocab` at least 64.
struct ArgmaxRows {
  uint32_t m = 0, vocab = 0;
  std::vector<uint16_t> logits;  // bf16 [m][vocab]
  std::vector<int32_t> ids;      // expected, one per row
};

inline ArgmaxRows argmax_rows(uint32_t vocab, uint64_t stream) {
  constexpr uint16_t kNan = 0x7fc0, kNegNan = 0xffc0, kInf = 0x7f80, kNegInf = 0xff80, kNegZero = 0x8000, kZero = 0;
  const uint16_t big = to_bf16(100.0f), neg = to_bf16(-1.0f);
  ArgmaxRows out;
  out.vocab = vocab;
  std::vector<uint16_t> noise = eighths(size_t{vocab} * 11, stream);  // values in [-4, 4)
  const auto row = [&](int32_t id, auto&& edit) {
    std::vector<uint16_t> r(noise.begin() + std::ptrdiff_t{out.m} * vocab, noise.begin() + std::ptrdiff_t{out.m + 1} * vocab);
    edit(r);
    out.logits.insert(out.logits.end(), r.begin(), r.end());
    out.ids.push_back(id);
    ++out.m;
  };
  const int32_t last = static_cast<int32_t>(vocab - 1);
  row(0, [&](auto& r) { r[0] = big; });                                        // the first index
  row(last, [&](auto& r) { r[vocab - 1] = big; });                             // the last index
  row(5, [&](auto& r) { r[5] = r[37] = r[vocab - 1] = big; });                 // ties: the lowest
  row(0, [&](auto& r) { std::fill(r.begin(), r.end(), neg); });                // all equal
  row(3, [&](auto& r) { std::fill(r.begin(), r.end(), neg); r[3] = kNegZero; r[9] = kZero; });  // -0 == +0
  row(last - 1, [&](auto& r) { r[vocab - 2] = r[vocab - 1] = kInf; });         // +inf twice
  row(0, [&](auto& r) { std::fill(r.begin(), r.end(), kNegInf); });            // all -inf
  row(17, [&](auto& r) { r[2] = kInf; r[17] = kNan; r[40] = kNegNan; });       // NaN above +inf, the first
  row(last, [&](auto& r) { r[vocab - 1] = kNegNan; });                         // a NaN at the end
  row(0, [&](auto& r) { std::fill(r.begin(), r.end(), kNan); });               // all NaN
  row(last - 2, [&](auto& r) { r[vocab - 3] = to_bf16(4.0f); });               // just above the noise's range
  return out;
}

}  // namespace decoder_mirror
