// SPDX-License-Identifier: MIT OR Apache-2.0
// Where one decoder layer's FFN lives in a checkpoint (docs/checkpoint-formats.md, "Tensor names
// by architecture"), decided from the tensor names the checkpoint holds — never from its
// model_type or the transformers version that wrote it:
//   dense     <block>{gate,up,down}_proj (Qwen2/Qwen3/Llama, DeepSeek's dense layers)
//   router    <block>gate, wherever the layer keeps it (mlp. or block_sparse_moe.)
//   experts   <block>experts.E.{w1,w3,w2} (Mixtral as transformers 4 names it),
//             <block>experts.E.{gate,up,down}_proj (Qwen-MoE, DeepSeek, and Mixtral as
//             transformers 5 saves per-expert modules), or fused <block>experts.gate_up_proj
//             [E, 2I, H] + <block>experts.down_proj [E, H, I] (transformers 5's own expert
//             modules, e.g. FineGrainedFP8 checkpoints)
//   shared    Qwen2-MoE's shared_expert.* + shared_expert_gate, DeepSeek's shared_experts.*
// A layer whose tensors follow none of these is a Refusal naming the tensors found.
#pragma once

#include "io/config.hpp"
#include "io/tensor_source.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace metrale::layers {

struct FfnNames {
  std::string block;  // the dense FFN's or the experts' block: "model.layers.3.mlp." / "...block_sparse_moe."
  // The projections of the dense FFN or of each expert: gate_proj/up_proj/down_proj or w1/w3/w2.
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
  bool fused_experts = false;  // <block>experts.gate_up_proj / .down_proj hold every expert
  std::string router;       // "<block>gate" of the block that holds it
  std::string shared;       // block + "shared_expert." / "shared_experts."; empty: none
  std::string shared_gate;  // block + "shared_expert_gate"; empty: none
  std::string layout;       // what was found, for messages: "per-expert w1/w3/w2 (transformers 4 Mixtral names)"

  std::string experts() const { return block + "experts."; }
  std::string expert(uint32_t e) const { return experts() + std::to_string(e) + "."; }
};

// The layers that have FFN tensors, lowest first; Error(invalid_argument) naming the checkpoint
// when there are none.
std::vector<uint32_t> ffn_layers(const TensorSource& src);

// The names of layer `layer`'s FFN, for a layer whose FFN is dense or a MoE as `config` says.
// Throws Error(not_found) naming the checkpoint and the layers present when there is no such layer,
// Error(invalid_argument) when the layer's tensors contradict `config` (a MoE layer without
// experts), and Refusal naming the tensors when they are in a layout metrale does not read.
FfnNames ffn_names(const TensorSource& src, const ModelConfig& config, uint32_t layer);

}  // namespace metrale::layers
