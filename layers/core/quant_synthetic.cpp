// SPDX-License-Identifier: MIT OR Apache-2.0
#include "core/quant_synthetic.hpp"

#include "core/numeric.hpp"
#include "core/rng.hpp"
#include "core/w4a16.hpp"

#include <cmath>
#include <utility>

namespace metrale::layers {

namespace {

// Codes packed along K, lowest bits first; `code(i)` gives the i-th code of the whole stack.
template <class Code>
void fill_codes(QuantMatrix& m, Code code) {
  const uint32_t bits = m.bits();
  const uint32_t per_word = 32 / bits;
  for (size_t w = 0; w < m.qweight.size(); ++w) {
    uint32_t word = 0;
    for (uint32_t i = 0; i < per_word; ++i) word |= code(w * per_word + i) << (bits * i);
    m.qweight[w] = word;
  }
}

// Zero-point formats: codes uniform over the range, zero points near its middle (as a quantizer
// of roughly centred weights leaves them), scales for unit spread of the dot product.
void fill_zero_point(QuantMatrix& m, uint64_t seed, bool symmetric) {
  const uint32_t levels = 1u << m.bits();
  SplitMix64 codes(derive_seed(seed, m.name + "/qweight"));
  fill_codes(m, [&](size_t) { return static_cast<uint32_t>(codes.next() % levels); });
  SplitMix64 zeros(derive_seed(seed, m.name + "/zeros"));
  const uint32_t spread = symmetric ? 0 : levels / 4;  // zero points in the middle half of the range
  for (auto& z : m.zeros) z = static_cast<uint8_t>(levels / 2 - spread / 2 + zeros.next() % (spread + 1));
  // E[(q - z)^2] for uniform q and z near the middle: the codes' variance plus a little.
  const double var = (static_cast<double>(levels) * levels - 1) / 12.0 + spread * spread / 12.0;
  const double base = 1.0 / std::sqrt(static_cast<double>(m.k) * var);
  SplitMix64 scales(derive_seed(seed, m.name + "/scales"));
  for (auto& s : m.scales32) s = static_cast<float>(base * scales.uniform(0.5, 1.5));
}

// FP8: codes from normally distributed weights spread over E4M3's range (no NaN), block scales
// (one per 128 x 128 block, as block-FP8 checkpoints store them) for unit spread.
void fill_fp8(QuantMatrix& m, uint64_t seed) {
  SplitMix64 codes(derive_seed(seed, m.name + "/qweight"));
  constexpr double kSpread = 448.0 / 4;
  fill_codes(m, [&](size_t) {
    // Box-Muller from two uniforms: a normal sample, saturated by the conversion.
    const double u = std::max(codes.uniform(), 0x1.0p-53), v = codes.uniform();
    const double normal = std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
    return static_cast<uint32_t>(f32_to_e4m3(static_cast<float>(normal * kSpread)));
  });
  const double base = 1.0 / (std::sqrt(static_cast<double>(m.k)) * kSpread);
  SplitMix64 scales(derive_seed(seed, m.name + "/scales"));
  const uint32_t groups = m.groups();
  for (uint32_t e = 0; e < m.batch; ++e) {
    for (uint32_t row_block = 0; row_block * 128 < m.n; ++row_block) {
      for (uint32_t g = 0; g < groups; ++g) {
        const auto s = static_cast<float>(base * scales.uniform(0.5, 1.5));
        for (uint32_t r = row_block * 128; r < std::min(m.n, row_block * 128 + 128); ++r) {
          m.scales32[(size_t{e} * m.n + r) * groups + g] = s;
        }
      }
    }
  }
}

// bf16 / f16 weights: normally distributed values for unit spread of the dot product, rounded
// to the format.
void fill_float16(QuantMatrix& m, uint64_t seed) {
  SplitMix64 values(derive_seed(seed, m.name + "/weight"));
  const double spread = 1.0 / std::sqrt(static_cast<double>(m.k));
  fill_codes(m, [&](size_t) {
    const double u = std::max(values.uniform(), 0x1.0p-53), v = values.uniform();
    const auto w = static_cast<float>(std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v) * spread);
    return static_cast<uint32_t>(m.format == WeightFormat::bf16 ? f32_to_bf16(w) : f32_to_f16(w));
  });
}

// A uniformly random permutation of 0..k-1 per matrix (Fisher-Yates from its seed).
void fill_permutation(QuantMatrix& m, uint64_t seed) {
  SplitMix64 rng(derive_seed(seed, m.name + "/perm"));
  m.perm.resize(size_t{m.batch} * m.k);
  for (uint32_t e = 0; e < m.batch; ++e) {
    int32_t* p = m.perm.data() + size_t{e} * m.k;
    for (uint32_t c = 0; c < m.k; ++c) p[c] = static_cast<int32_t>(c);
    for (uint32_t c = m.k - 1; c > 0; --c) std::swap(p[c], p[rng.next() % (c + 1)]);
  }
}

}  // namespace

QuantMatrix synthetic_quant(std::string name, WeightFormat format, uint32_t n, uint32_t k, uint64_t seed, uint32_t batch,
                            const SyntheticQuantOptions& options) {
  QuantMatrix m;
  if (format == WeightFormat::w4a16) {
    m = synthetic_w4a16(std::move(name), n, k, seed, batch);
  } else {
    const bool fixed = format == WeightFormat::fp8 || !weight_format_has_scales(format);
    m = quant_zeros(std::move(name), format, n, k, batch, fixed ? kW4a16GroupSize : options.group);
    if (format == WeightFormat::fp8) {
      fill_fp8(m, seed);
    } else if (!weight_format_has_scales(format)) {
      fill_float16(m, seed);
    } else {
      fill_zero_point(m, seed, options.symmetric);
    }
  }
  if (options.act_order) fill_permutation(m, seed);
  return m;
}

std::optional<WeightFormat> parse_weight_tier(std::string_view name) noexcept {
  for (auto f : {WeightFormat::w4a16, WeightFormat::w4_zp, WeightFormat::w8_zp, WeightFormat::fp8, WeightFormat::bf16,
                 WeightFormat::f16})
    if (name == weight_tier_name(f)) return f;
  return std::nullopt;
}

const char* weight_tier_name(WeightFormat format) noexcept {
  switch (format) {
    case WeightFormat::w4a16: return "int4";
    case WeightFormat::w4_zp: return "int4-zp";
    case WeightFormat::w8_zp: return "int8";
    case WeightFormat::fp8: return "fp8";
    case WeightFormat::bf16: return "bf16";
    case WeightFormat::f16: return "f16";
  }
  return "?";
}

}  // namespace metrale::layers
