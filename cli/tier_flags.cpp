// SPDX-License-Identifier: MIT OR Apache-2.0
#include "tier_flags.hpp"

namespace metrale::cli {

void add_tier_flags(CLI::App& cmd, TierFlags& flags) {
  cmd.add_option("--activation-quantization", flags.activation_quantization,
                 "Activation tier: bf16, int8 or fp8 (quantized per token); explicit: refused when the backend lacks it "
                 "(default: METRALE_ACTIVATION_QUANTIZATION, else what the checkpoint declares, else bf16)");
  cmd.add_option("--weight-quantization", flags.weight_quantization,
                 "Synthetic weights' format: int4 (symmetric group-128 W4A16), int4-zp, int8, fp8, bf16 or f16 (unquantized) "
                 "(default: METRALE_WEIGHT_QUANTIZATION, else int4); a checkpoint's format is what it declares");
  cmd.add_option("--expert-quantization", flags.expert_quantization,
                 "Synthetic MoE experts' format when it differs (default: METRALE_EXPERT_QUANTIZATION, else the weights')");
  cmd.add_option("--group-size", flags.group_size, "Synthetic int4-zp / int8 weights: group size along K (32, 64 or 128)")
      ->check(CLI::IsMember({32u, 64u, 128u}))
      ->capture_default_str();
}

void apply_tier_flags(const TierFlags& flags, layers::LayerRequest& request) {
  request.activations = layers::TierAsk{flags.activation_quantization, "--activation-quantization"};
  request.weight_format = layers::TierAsk{flags.weight_quantization, "--weight-quantization"};
  request.expert_format = layers::TierAsk{flags.expert_quantization, "--expert-quantization"};
  request.group_size = flags.group_size;
}

}  // namespace metrale::cli
