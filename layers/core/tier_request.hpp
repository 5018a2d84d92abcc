// SPDX-License-Identifier: MIT OR Apache-2.0
// What a build is asked to quantize, and where each request came from (docs/quantization.md):
// a command-line flag or its lever is explicit (a backend that cannot honour it is a Refusal);
// what a checkpoint declares is a default (the layers fall back visibly). Levers are read once
// per process; a bad value is a Refusal naming the variable and the value.
#pragma once

#include "core/quant_matrix.hpp"
#include "core/tier_ask.hpp"
#include "core/tiers.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace metrale::layers {

inline constexpr std::string_view kActivationQuantizationLever = "METRALE_ACTIVATION_QUANTIZATION";
inline constexpr std::string_view kWeightQuantizationLever = "METRALE_WEIGHT_QUANTIZATION";
inline constexpr std::string_view kExpertQuantizationLever = "METRALE_EXPERT_QUANTIZATION";

// The activation tier a build was asked for.
struct ActivationRequest {
  ActivationQuant tier = ActivationQuant::bf16;
  bool is_explicit = false;
  std::string source = "default";  // "--activation-quantization int8", "METRALE_ACTIVATION_QUANTIZATION=int8", "m/config.json"
  ActivationScaling scaling;  // the checkpoint's, when its tier is the one run; else one scale per row in f32
};

// What `asked` says, else the lever, else what the checkpoint declares (`declared_source` names
// it), else bf16. A value that is no tier is a Refusal naming `asked.source()`. The declared
// scaling goes with the declared tier, whoever asked for it.
ActivationRequest activation_request(const TierAsk& asked, std::optional<ActivationQuant> declared = std::nullopt,
                                     const std::string& declared_source = {}, ActivationScaling declared_scaling = {});

// The weight formats asked for synthetic weights: `weights` / METRALE_WEIGHT_QUANTIZATION
// (default int4: the W4A16 format), `experts` / METRALE_EXPERT_QUANTIZATION for MoE experts
// (default: the weights' tier). nullopt members: not asked for.
struct WeightTierRequest {
  std::optional<WeightFormat> weights;
  std::string weights_source;
  std::optional<WeightFormat> experts;
  std::string experts_source;
};
WeightTierRequest weight_tier_request(const TierAsk& weights, const TierAsk& experts);

}  // namespace metrale::layers
