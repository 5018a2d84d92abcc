// SPDX-License-Identifier: MIT OR Apache-2.0
#include "core/tiers.hpp"

#include "core/numeric.hpp"

#include <algorithm>
#include <cmath>

namespace metrale::layers {

const char* activation_quant_name(ActivationQuant a) noexcept {
  switch (a) {
    case ActivationQuant::bf16: return "bf16";
    case ActivationQuant::int8: return "int8";
    case ActivationQuant::fp8: return "fp8";
  }
  return "?";
}

std::optional<ActivationQuant> parse_activation_quant(std::string_view text) noexcept {
  for (auto a : {ActivationQuant::bf16, ActivationQuant::int8, ActivationQuant::fp8})
    if (text == activation_quant_name(a)) return a;
  return std::nullopt;
}

std::string activation_scaling_name(ActivationScaling scaling) {
  std::string name = scaling.static_tensor ? "static per tensor" : scaling.group128 ? "per 128 columns" : "per row";
  if (scaling.arithmetic == ScaleArithmetic::bf16) name += ", bf16 arithmetic";
  return name;
}

namespace {

double bf16_rounded(double v) { return bf16_to_f32(f32_to_bf16(static_cast<float>(v))); }

}  // namespace

float activation_scale(ActivationQuant a, ScaleArithmetic arithmetic, double amax) noexcept {
  if (a == ActivationQuant::bf16) return 1.0f;
  const bool bf16 = arithmetic == ScaleArithmetic::bf16;
  const float divisor = a == ActivationQuant::fp8 ? 448.0f : bf16 ? 127.5f : 127.0f;
  const float scale = static_cast<float>(amax) / divisor;
  if (!bf16) return scale;
  return std::max(static_cast<float>(bf16_rounded(scale)), 0x1p-23f);
}

void quantize_with_scale(ActivationQuant a, ScaleArithmetic arithmetic, const double* x, uint32_t n, float scale,
                         double* out) noexcept {
  const bool bf16 = arithmetic == ScaleArithmetic::bf16;
  const double low = a == ActivationQuant::fp8 ? -448.0 : bf16 ? -128.0 : -127.0;
  const double high = a == ActivationQuant::fp8 ? 448.0 : 127.0;
  for (uint32_t i = 0; i < n; ++i) {
    if (a == ActivationQuant::bf16) {
      out[i] = x[i];
      continue;
    }
    if (scale == 0.0f) {
      out[i] = 0.0;
      continue;
    }
    double quotient = static_cast<float>(x[i]) / scale;  // f32 division, as the kernels do it
    if (bf16) quotient = bf16_rounded(quotient);
    quotient = std::clamp(quotient, low, high);
    const double code = a == ActivationQuant::int8 ? std::nearbyint(quotient)
                                                   : static_cast<double>(e4m3_to_f32(f32_to_e4m3(static_cast<float>(quotient))));
    out[i] = code * static_cast<double>(scale);
  }
}

void quantize_row(ActivationQuant a, ActivationScaling scaling, const double* x, uint32_t k, double* out,
                  float* scales) noexcept {
  const uint32_t width = scale_width(scaling, k);
  for (uint32_t g = 0; g < k / width; ++g) {
    double amax = 0.0;
    for (uint32_t i = 0; i < width; ++i) amax = std::max(amax, std::fabs(x[size_t{g} * width + i]));
    scales[g] = activation_scale(a, scaling.arithmetic, amax);
    quantize_with_scale(a, scaling.arithmetic, x + size_t{g} * width, width, scales[g], out + size_t{g} * width);
  }
}

}  // namespace metrale::layers
