// SPDX-License-Identifier: MIT OR Apache-2.0
// What to open: one layer of a model, its weights and the tiers asked for (docs/layers.md,
// "Opening a layer"). Public (docs/embedding.md): a program gives one to EmbeddedFfn (embed.hpp);
// in the tree the same request goes to open_layer (compose.hpp), the one composition, so both get
// what `metrale run` gets. A plain value owned by the caller; `progress` is called on the thread
// that opens the layer.
#pragma once

#include "core/tier_ask.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace metrale::layers {

inline constexpr const char* kDefaultModel = "small-dense";

// Which block of a decoder layer to open: the FFN (the default), the self-attention alone, or the
// whole decoder layer (norms, attention, FFN, residuals). The last two need a checkpoint's weights.
enum class LayerBlock { ffn, attention, decoder };

struct LayerRequest {
  std::string model;    // a preset or a config.json (or its directory); empty: the config.json
                        // beside `weights`, else kDefaultModel
  std::string weights;  // a checkpoint (directory, .safetensors, index) or a file in the project's
                        // tensor names; empty: synthetic weights from `seed`
  std::optional<uint32_t> layer;  // the decoder layer (default: the lowest with an FFN; 0 for the other blocks)
  LayerBlock block = LayerBlock::ffn;
  uint64_t seed = 1;
  TierAsk activations;    // bf16, int8 or fp8 (else the lever, the checkpoint's, bf16)
  TierAsk weight_format;  // synthetic weights: int4, int4-zp, int8, fp8, bf16, f16; a checkpoint's may only repeat its own
  TierAsk expert_format;  // synthetic MoE experts, when they differ
  std::optional<uint32_t> group_size;  // synthetic zero-point weights (default: the W4A16 group, 128)
  // MoE: launch the experts one by one without looking the grouped kernel up, as a backend
  // without it would (`metrale run --per-expert`), for tests and benchmarks of that path.
  bool per_expert = false;
  // Optional: told when a long stage starts (fraction 0) and ends (1): "loading DIR", ...
  std::function<void(const std::string& stage, double fraction)> progress;
};

}  // namespace metrale::layers
