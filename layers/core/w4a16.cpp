// SPDX-License-Identifier: MIT OR Apache-2.0
#include "core/w4a16.hpp"

#include "core/checked.hpp"
#include "core/numeric.hpp"
#include "core/rng.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace metrale::layers {

QuantMatrix w4a16_zeros(std::string name, uint32_t n, uint32_t k, uint32_t batch) {
  return quant_zeros(std::move(name), WeightFormat::w4a16, n, k, batch);
}

namespace {

template <class Load>
QuantMatrix quantize_impl(std::string name, uint32_t n, uint32_t k, size_t given, uint32_t batch, Load load) {
  check_w4a16_shape(name, n, k, batch);
  if (given != size_t{batch} * n * k) {
    throw Error(Status::invalid_argument, name + ": quantize_w4a16 got " + std::to_string(given) + " values for shape [" +
                                              std::to_string(batch) + ", " + std::to_string(n) + ", " +
                                              std::to_string(k) + "]");
  }
  QuantMatrix m = w4a16_zeros(std::move(name), n, k, batch);
  const uint32_t groups = k / kW4a16GroupSize;
  for (size_t row = 0; row < size_t{batch} * n; ++row) {
    for (uint32_t g = 0; g < groups; ++g) {
      const size_t base = row * k + size_t{g} * kW4a16GroupSize;
      float amax = 0.0f;
      for (uint32_t i = 0; i < kW4a16GroupSize; ++i) {
        float v = load(base + i);
        if (!std::isfinite(v)) {
          throw Error(Status::invalid_argument, m.name + ": non-finite weight at row " + std::to_string(row) +
                                                    ", column " + std::to_string(g * kW4a16GroupSize + i));
        }
        amax = std::max(amax, std::fabs(v));
      }
      uint16_t scale_bits = f32_to_f16(amax * (2.0f / 15.0f));
      float scale = f16_to_f32(scale_bits);
      if (!std::isfinite(scale)) {
        throw Error(Status::invalid_argument, m.name + ": group " + std::to_string(g) + " of row " + std::to_string(row) +
                                                  " has max |w| = " + std::to_string(amax) + ", too large for an fp16 scale");
      }
      m.scales[row * groups + g] = scale_bits;
      for (uint32_t i = 0; i < kW4a16GroupSize; ++i) {
        uint32_t code = 8;
        if (scale > 0.0f) {
          float q = std::nearbyint(load(base + i) / scale) + 8.0f;
          code = static_cast<uint32_t>(std::clamp(q, 0.0f, 15.0f));
        }
        const uint32_t col = g * kW4a16GroupSize + i;
        uint32_t& word = m.qweight[row * (k / 8) + col / 8];
        const uint32_t shift = 4 * (col % 8);
        word = (word & ~(0xfu << shift)) | (code << shift);
      }
    }
  }
  return m;
}

}  // namespace

QuantMatrix quantize_w4a16(std::string name, uint32_t n, uint32_t k, std::span<const float> w, uint32_t batch) {
  return quantize_impl(std::move(name), n, k, w.size(), batch, [&](size_t i) { return w[i]; });
}

QuantMatrix quantize_w4a16_bf16(std::string name, uint32_t n, uint32_t k, std::span<const uint16_t> w,
                                uint32_t batch) {
  return quantize_impl(std::move(name), n, k, w.size(), batch, [&](size_t i) { return bf16_to_f32(w[i]); });
}

std::vector<float> dequantize(const QuantMatrix& matrix) {
  matrix.validate();
  std::vector<float> out(size_t{matrix.batch} * matrix.n * matrix.k);
  std::vector<double> row(matrix.k);
  size_t at = 0;
  for (uint32_t e = 0; e < matrix.batch; ++e) {
    QuantView v = matrix.view(e);
    for (uint32_t r = 0; r < matrix.n; ++r) {
      v.dequantize_row(r, row);
      for (double x : row) out[at++] = static_cast<float>(x);
    }
  }
  return out;
}

QuantMatrix synthetic_w4a16(std::string name, uint32_t n, uint32_t k, uint64_t seed, uint32_t batch) {
  check_w4a16_shape(name, n, k, batch);
  QuantMatrix m;
  m.batch = batch;
  m.n = n;
  m.k = k;
  m.qweight.resize(size_t{batch} * m.words_per_matrix());
  m.scales.resize(size_t{batch} * m.scales_per_matrix());
  // Independent streams for codes and scales, keyed by the tensor name.
  SplitMix64 codes(derive_seed(seed, name + "/qweight"));
  for (size_t i = 0; i < m.qweight.size(); i += 2) {
    uint64_t bits = codes.next();
    m.qweight[i] = static_cast<uint32_t>(bits);
    if (i + 1 < m.qweight.size()) m.qweight[i + 1] = static_cast<uint32_t>(bits >> 32);
  }
  // E[(q-8)^2] = 21.5 for uniform codes; scale so that sum over K of (q-8)*s*x has unit spread.
  const double base = 1.0 / (std::sqrt(static_cast<double>(k)) * std::sqrt(21.5));
  SplitMix64 scales(derive_seed(seed, name + "/scales"));
  for (auto& s : m.scales) s = f32_to_f16(static_cast<float>(base * scales.uniform(0.5, 1.5)));
  m.name = std::move(name);
  return m;
}

}  // namespace metrale::layers
