// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/ffn_names.hpp"

#include "io/safetensors_header.hpp"  // display_name
#include "io/tensor_names.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <map>
#include <set>

namespace metrale::layers {

namespace {

// Layer number -> its FFN block prefixes ("model.layers.3.mlp."; a checkpoint may keep the router
// under one block and the experts under another).
std::map<uint32_t, std::set<std::string>> ffn_blocks(const TensorSource& src, const std::vector<std::string>& names) {
  std::map<uint32_t, std::set<std::string>> blocks;
  for (const auto& name : names) {
    const auto parsed = ffn_layer_of(name);
    if (!parsed) continue;
    if (!parsed->layer) {
      throw Error(Status::invalid_argument, src.description() + ": tensor '" + display_name(name) + "': layer number " +
                                                std::string(parsed->layer_digits) + " does not fit in 32 bits");
    }
    blocks[*parsed->layer].insert(std::string(parsed->prefix));
  }
  return blocks;
}

// The sorted names that start with `prefix`.
std::vector<std::string_view> names_under(const std::vector<std::string>& names, std::string_view prefix) {
  std::vector<std::string_view> out;
  for (auto it = std::lower_bound(names.begin(), names.end(), prefix); it != names.end() && it->starts_with(prefix); ++it) {
    out.emplace_back(*it);
  }
  return out;
}

bool any_under(const std::vector<std::string>& names, std::string_view prefix) {
  auto it = std::lower_bound(names.begin(), names.end(), prefix);
  return it != names.end() && it->starts_with(prefix);
}

// Up to four of the names under `prefix`, for a refusal.
std::string some_names(const std::vector<std::string>& names, std::string_view prefix) {
  const auto found = names_under(names, prefix);
  std::string out;
  for (size_t i = 0; i < found.size() && i < 4; ++i) out += (i ? ", " : "") + display_name(found[i]);
  if (found.size() > 4) out += ", ... (" + std::to_string(found.size()) + " tensors)";
  return out.empty() ? "none" : out;
}

[[noreturn]] void unknown_layout(const TensorSource& src, uint32_t layer, const std::string& what, const std::string& found,
                                 const std::string& expected) {
  throw Refusal(src.description() + ": layer " + std::to_string(layer) + ": " + what + " are in a layout metrale does not " +
                "read (tensors " + found + "): expected " + expected);
}

// The one block of `blocks` for which `has(block)` holds; "" when none. Two is ambiguous: a refusal.
template <class Has>
std::string the_block(const TensorSource& src, uint32_t layer, const std::set<std::string>& blocks, const char* what, Has has) {
  std::string chosen;
  for (const auto& block : blocks) {
    if (!has(block)) continue;
    if (!chosen.empty()) {
      throw Refusal(src.description() + ": layer " + std::to_string(layer) + ": " + what + " under both '" + chosen +
                    "' and '" + block + "': one FFN per layer");
    }
    chosen = block;
  }
  return chosen;
}

// The experts' layout under names.block: fused 3-D tensors, or per-expert w1/w3/w2 or
// gate_proj/up_proj/down_proj, read from expert 0's names.
void expert_layout(const TensorSource& src, const std::vector<std::string>& names, uint32_t layer, FfnNames& n) {
  if (any_under(names, n.experts() + "gate_up_proj") || any_under(names, n.experts() + "down_proj")) {
    n.fused_experts = true;
    n.layout = "fused experts.gate_up_proj [E, 2I, H] + experts.down_proj [E, H, I] (transformers 5 expert modules)";
    return;
  }
  const bool w_names = any_under(names, n.expert(0) + "w1.") || any_under(names, n.expert(0) + "w2.");
  const bool proj_names = any_under(names, n.expert(0) + "gate_proj.") || any_under(names, n.expert(0) + "down_proj.");
  if (w_names == proj_names) {
    unknown_layout(src, layer, "the experts' tensors", some_names(names, n.expert(0)),
                   "experts.<E>.{w1,w3,w2} (transformers 4 Mixtral), experts.<E>.{gate,up,down}_proj, or fused "
                   "experts.gate_up_proj + experts.down_proj");
  }
  if (w_names) {
    n.gate = "w1";
    n.up = "w3";
    n.down = "w2";
    n.layout = "per-expert w1/w3/w2 (transformers 4 Mixtral names)";
  } else {
    n.layout = "per-expert gate_proj/up_proj/down_proj";
  }
}

FfnNames moe_names(const TensorSource& src, const std::vector<std::string>& names, const ModelConfig& config,
                   uint32_t layer, const std::set<std::string>& blocks) {
  FfnNames n;
  n.block = the_block(src, layer, blocks, "experts", [&](const std::string& b) { return any_under(names, b + "experts."); });
  if (n.block.empty()) {
    throw Error(Status::invalid_argument, src.description() + ": layer " + std::to_string(layer) + ": " + config.source +
                                              " makes it a MoE of " + std::to_string(config.num_experts) +
                                              " experts, but it has no experts tensors (found " +
                                              some_names(names, *blocks.begin()) + ")");
  }
  expert_layout(src, names, layer, n);
  const std::string router = the_block(src, layer, blocks, "a router", [&](const std::string& b) { return any_under(names, b + "gate."); });
  n.router = (router.empty() ? n.block : router) + "gate";
  if (config.shared_expert_intermediate_size > 0) {
    // Qwen2-MoE: one gated shared_expert; DeepSeek: shared_experts, ungated.
    const bool deepseek = any_under(names, n.block + "shared_experts.");
    n.shared = n.block + (deepseek ? "shared_experts." : "shared_expert.");
    if (!deepseek) n.shared_gate = n.block + "shared_expert_gate";
  }
  return n;
}

FfnNames dense_names(const TensorSource& src, const std::vector<std::string>& names, uint32_t layer,
                     const std::set<std::string>& blocks) {
  FfnNames n;
  n.block = the_block(src, layer, blocks, "a dense FFN", [&](const std::string& b) {
    return any_under(names, b + "gate_proj.") || any_under(names, b + "down_proj.");
  });
  if (n.block.empty()) {
    unknown_layout(src, layer, "the dense FFN's tensors", some_names(names, *blocks.begin()),
                   "<block>{gate_proj,up_proj,down_proj} (or a MoE, as config.json would say)");
  }
  n.router = n.block + "gate";
  n.layout = "dense gate_proj/up_proj/down_proj";
  return n;
}

}  // namespace

std::vector<uint32_t> ffn_layers(const TensorSource& src) {
  std::vector<uint32_t> layers;
  for (const auto& [layer, blocks] : ffn_blocks(src, src.names())) layers.push_back(layer);
  if (layers.empty()) {
    throw Error(Status::invalid_argument,
                src.description() + ": no FFN tensors found: expected the project's names (ffn.gate_up.qweight, "
                                    "ffn.router.weight, ...) or Hugging Face names (model.layers.<L>.mlp.gate_proj..., "
                                    "model.layers.<L>.block_sparse_moe...)");
  }
  return layers;
}

FfnNames ffn_names(const TensorSource& src, const ModelConfig& config, uint32_t layer) {
  const std::vector<std::string> names = src.names();  // sorted
  const auto blocks = ffn_blocks(src, names);
  auto it = blocks.find(layer);
  if (it == blocks.end()) {
    const std::string range = blocks.empty() ? std::string("none")
                                             : std::to_string(blocks.begin()->first) + ".." + std::to_string(blocks.rbegin()->first);
    throw Error(Status::not_found, src.description() + ": no FFN tensors for layer " + std::to_string(layer) + " (layers " +
                                       range + " present)");
  }
  return config.ffn_kind() == FfnKind::moe ? moe_names(src, names, config, layer, it->second)
                                           : dense_names(src, names, layer, it->second);
}

}  // namespace metrale::layers
