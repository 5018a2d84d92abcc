// SPDX-License-Identifier: MIT OR Apache-2.0
// The quantization-tier flags `metrale run` and `metrale audit` share (docs/quantization.md):
// --activation-quantization, --weight-quantization, --expert-quantization and --group-size,
// registered once here and turned into the layers' requests the same way for both commands.
#pragma once

#include <layers/compose.hpp>

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

// The tiers the flags ask for, into a layer request (each with the flag's name as its source).
void apply_tier_flags(const TierFlags& flags, layers::LayerRequest& request);

}  // namespace metrale::cli
