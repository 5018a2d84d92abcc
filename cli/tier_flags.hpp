// SPDX-License-Identifier: MIT OR Apache-2.0
// The quantization-tier flags `metrale run` and `metrale audit` share (docs/quantization.md):
// --activation-quantization, --weight-quantization, --expert-quantization and --group-size,
// registered once here and turned into the layers' requests the same way for both commands.
#pragma once

#include <layers/core/tier_request.hpp>
#include <layers/io/weights.hpp>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace metrale::cli {

struct TierFlags {
  std::string activation_quantization;  // "": the lever, else what the checkpoint declares, else bf16
  std::string weight_quantization;      // synthetic weights: "": the lever, else int4
  std::string expert_quantization;      // synthetic MoE experts: "": the lever, else the weights'
  uint32_t group_size = 128;            // synthetic zero-point weights
};

// Adds the four options to `cmd`, storing into `flags` (which must outlive the parse).
void add_tier_flags(CLI::App& cmd, TierFlags& flags);

// The weight formats the flags (or their levers) ask for: weights default to int4 (W4A16),
// experts to the weights'. Throws Refusal for a value that is not a tier.
layers::SyntheticFormats synthetic_formats(const TierFlags& flags);

// The activation request: the flag, else its lever, else `declared` (a checkpoint's), else bf16.
layers::ActivationRequest activation_tier(const TierFlags& flags,
                                          std::optional<layers::ActivationQuant> declared = std::nullopt,
                                          const std::string& declared_source = {});

}  // namespace metrale::cli
