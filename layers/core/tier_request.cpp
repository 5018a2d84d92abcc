// SPDX-License-Identifier: MIT OR Apache-2.0
#include "core/tier_request.hpp"

#include "core/quant_synthetic.hpp"

#include <metrale/levers.hpp>
#include <metrale/status.hpp>

namespace metrale::layers {

namespace {

// A weight tier from what was asked or, when nothing was, the lever; nullopt when neither.
std::optional<WeightFormat> weight_tier(const TierAsk& asked, std::string_view lever, std::string& source) {
  if (!asked.value.empty()) {
    const auto format = parse_weight_tier(asked.value);
    if (!format) throw Refusal(asked.source() + " is not valid: expected int4, int4-zp, int8, fp8, bf16 or f16");
    source = asked.source();
    return format;
  }
  if (auto value = lever_choice(lever)) {
    source = lever_note(lever);
    return parse_weight_tier(*value);
  }
  return std::nullopt;
}

}  // namespace

ActivationRequest activation_request(const TierAsk& asked, std::optional<ActivationQuant> declared,
                                     const std::string& declared_source, ActivationScaling declared_scaling) {
  const auto scaling_of = [&](ActivationQuant tier) { return declared == tier ? declared_scaling : ActivationScaling{}; };
  if (!asked.value.empty()) {
    const auto tier = parse_activation_quant(asked.value);
    if (!tier) throw Refusal(asked.source() + " is not valid: expected bf16, int8 or fp8");
    return ActivationRequest{*tier, true, asked.source(), scaling_of(*tier)};
  }
  if (auto value = lever_choice(kActivationQuantizationLever)) {
    const ActivationQuant tier = *parse_activation_quant(*value);
    return ActivationRequest{tier, true, lever_note(kActivationQuantizationLever), scaling_of(tier)};
  }
  if (declared && *declared != ActivationQuant::bf16) return ActivationRequest{*declared, false, declared_source, declared_scaling};
  return ActivationRequest{};
}

WeightTierRequest weight_tier_request(const TierAsk& weights, const TierAsk& experts) {
  WeightTierRequest r;
  r.weights = weight_tier(weights, kWeightQuantizationLever, r.weights_source);
  r.experts = weight_tier(experts, kExpertQuantizationLever, r.experts_source);
  return r;
}

}  // namespace metrale::layers
