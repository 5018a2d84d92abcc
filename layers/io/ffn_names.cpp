// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/ffn_names.hpp"

#include "io/tensor_names.hpp"

#include <metrale/status.hpp>

#include <map>

namespace metrale::layers {

namespace {

// Layer number -> its FFN block prefix ("model.layers.3.mlp.").
std::map<uint32_t, std::string> ffn_blocks(const TensorSource& src) {
  std::map<uint32_t, std::string> blocks;
  for (const auto& name : src.names()) {
    const auto parsed = ffn_layer_of(name);
    if (!parsed) continue;
    if (!parsed->layer) {
      throw Error(Status::invalid_argument, src.description() + ": tensor '" + name + "': layer number " +
                                                std::string(parsed->layer_digits) + " does not fit in 32 bits");
    }
    blocks.emplace(*parsed->layer, std::string(parsed->prefix));
  }
  return blocks;
}

}  // namespace

std::vector<uint32_t> ffn_layers(const TensorSource& src) {
  std::vector<uint32_t> layers;
  for (const auto& [layer, block] : ffn_blocks(src)) layers.push_back(layer);
  if (layers.empty()) {
    throw Error(Status::invalid_argument,
                src.description() + ": no FFN tensors found: expected the project's names (ffn.gate_up.qweight, "
                                    "ffn.router.weight, ...) or Hugging Face names (model.layers.<L>.mlp.gate_proj..., "
                                    "model.layers.<L>.block_sparse_moe...)");
  }
  return layers;
}

FfnNames ffn_names(const TensorSource& src, const ModelConfig& config, uint32_t layer) {
  const auto blocks = ffn_blocks(src);
  auto it = blocks.find(layer);
  if (it == blocks.end()) {
    const std::string range = blocks.empty() ? std::string("none")
                                             : std::to_string(blocks.begin()->first) + ".." + std::to_string(blocks.rbegin()->first);
    throw Error(Status::not_found, src.description() + ": no FFN tensors for layer " + std::to_string(layer) + " (layers " +
                                       range + " present)");
  }
  FfnNames names;
  names.block = it->second;
  const bool mixtral = names.block.ends_with("block_sparse_moe.");
  if (mixtral) {
    names.gate = "w1";
    names.up = "w3";
    names.down = "w2";
  }
  names.router = names.block + "gate";
  if (config.ffn_kind() == FfnKind::moe && config.shared_expert_intermediate_size > 0) {
    // Qwen2-MoE: one gated shared_expert; DeepSeek: shared_experts, ungated.
    const bool deepseek = src.contains(names.block + "shared_experts." + names.down + ".weight") ||
                          src.contains(names.block + "shared_experts." + names.down + ".qweight") ||
                          src.contains(names.block + "shared_experts." + names.down + ".weight_packed");
    names.shared = names.block + (deepseek ? "shared_experts." : "shared_expert.");
    if (!deepseek) names.shared_gate = names.block + "shared_expert_gate";
  }
  return names;
}

}  // namespace metrale::layers
