// SPDX-License-Identifier: MIT OR Apache-2.0
// Where each architecture keeps one decoder layer's FFN (docs/checkpoint-formats.md, "Tensor
// names by architecture"): Qwen2/Qwen3/Llama dense (mlp.{gate,up,down}_proj), Qwen2-MoE/Qwen3-MoE
// (mlp.gate router, mlp.experts.E.*, Qwen2-MoE's mlp.shared_expert.* and mlp.shared_expert_gate),
// Mixtral (block_sparse_moe.gate, experts.E.{w1,w3,w2}) and DeepSeek (mlp.shared_experts.*).
#pragma once

#include "io/config.hpp"
#include "io/tensor_source.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace metrale::layers {

struct FfnNames {
  std::string block;  // "model.layers.3.mlp." or "model.layers.3.block_sparse_moe."
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";  // projections of an FFN or an expert
  std::string router;       // block + "gate"
  std::string shared;       // block + "shared_expert." / "shared_experts."; empty: none
  std::string shared_gate;  // block + "shared_expert_gate"; empty: none

  std::string expert(uint32_t e) const { return block + "experts." + std::to_string(e) + "."; }
};

// The layers that have FFN tensors, lowest first; Error(invalid_argument) naming the checkpoint
// when there are none.
std::vector<uint32_t> ffn_layers(const TensorSource& src);

// The names of layer `layer`'s FFN, for a layer whose FFN is dense or a MoE as `config` says.
// Throws Error(not_found) naming the checkpoint and the layers present when there is no such layer.
FfnNames ffn_names(const TensorSource& src, const ModelConfig& config, uint32_t layer);

}  // namespace metrale::layers
