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

void quantize_row_with_scale(ActivationQuant a, const double* x, uint32_t k, float scale, double* out) noexcept {
  for (uint32_t i = 0; i < k; ++i) {
    if (a == ActivationQuant::bf16) {
      out[i] = x[i];
    } else if (scale == 0.0f) {
      out[i] = 0.0;
    } else {
      const float quotient = static_cast<float>(x[i]) / scale;  // f32 division, as the kernels do it
      const double code = a == ActivationQuant::int8
                              ? std::clamp(static_cast<double>(std::nearbyint(quotient)), -127.0, 127.0)
                              : static_cast<double>(e4m3_to_f32(f32_to_e4m3(quotient)));
      out[i] = code * static_cast<double>(scale);
    }
  }
}

float quantize_row(ActivationQuant a, const double* x, uint32_t k, double* out) noexcept {
  float amax = 0.0f;
  for (uint32_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(static_cast<float>(x[i])));
  const float scale = a == ActivationQuant::int8 ? amax / 127.0f : a == ActivationQuant::fp8 ? amax / 448.0f : 1.0f;
  quantize_row_with_scale(a, x, k, scale, out);
  return scale;
}

}  // namespace metrale::layers
