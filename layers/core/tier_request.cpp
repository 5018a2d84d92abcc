// SPDX-License-Identifier: MIT OR Apache-2.0
#include "core/tier_request.hpp"

#include "core/quant_synthetic.hpp"

#include <metrale/levers.hpp>
#include <metrale/status.hpp>

namespace metrale::layers {

namespace {

// A weight tier from a flag value or, when none was given, the lever; nullopt when neither.
std::optional<WeightFormat> weight_tier(std::string_view flag, std::string_view cli, std::string_view lever,
                                        std::string& source) {
  if (!cli.empty()) {
    const auto format = parse_weight_tier(cli);
    if (!format) {
      throw Refusal(std::string(flag) + " " + std::string(cli) + " is not valid: expected int4, int4-zp, int8 or fp8");
    }
    source = std::string(flag) + " " + std::string(cli);
    return format;
  }
  if (auto value = lever_choice(lever)) {
    source = lever_note(lever);
    return parse_weight_tier(*value);
  }
  return std::nullopt;
}

}  // namespace

ActivationRequest activation_request(std::string_view cli_value, std::optional<ActivationQuant> declared,
                                     const std::string& declared_source) {
  if (!cli_value.empty()) {
    const auto tier = parse_activation_quant(cli_value);
    if (!tier) throw Refusal("--activation-quantization " + std::string(cli_value) + " is not valid: expected bf16, int8 or fp8");
    return ActivationRequest{*tier, true, "--activation-quantization " + std::string(cli_value)};
  }
  if (auto value = lever_choice(kActivationQuantizationLever)) {
    return ActivationRequest{*parse_activation_quant(*value), true, lever_note(kActivationQuantizationLever)};
  }
  if (declared && *declared != ActivationQuant::bf16) return ActivationRequest{*declared, false, declared_source};
  return ActivationRequest{};
}

WeightTierRequest weight_tier_request(std::string_view cli_weights, std::string_view cli_experts) {
  WeightTierRequest r;
  r.weights = weight_tier("--weight-quantization", cli_weights, kWeightQuantizationLever, r.weights_source);
  r.experts = weight_tier("--expert-quantization", cli_experts, kExpertQuantizationLever, r.experts_source);
  return r;
}

}  // namespace metrale::layers
