// SPDX-License-Identifier: MIT OR Apache-2.0
// The MoE half of config.json: the names each architecture gives the expert counts and widths,
// the routing (which metrale implements for softmax scoring and greedy top-k), and which decoder
// layers are dense in a MoE model (docs/checkpoint-formats.md, "Tensor names by architecture").
#include "io/config.hpp"
#include "io/config_json.hpp"

#include <metrale/json_file.hpp>
#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace metrale::layers {

namespace {

// Only softmax scoring and a plain top-k route as moe/topk_softmax does.
void check_routing(const config_json::Object& f) {
  if (auto scoring = f.string("scoring_func"); scoring && *scoring != "softmax") {
    f.unsupported("scoring_func", nlohmann::json(*scoring), "softmax (the routing of moe/topk_softmax)");
  }
  const auto method = f.string("topk_method").value_or("greedy");
  if (method == "greedy") return;
  const auto groups = f.u32("n_group").value_or(1);
  const auto kept = f.u32("topk_group").value_or(groups);
  if (method == "group_limited_greedy" && kept >= groups) return;  // keeps every group: a plain top-k
  throw Refusal(f.where("topk_method") + " = " + config_json::value_text(method) + " (n_group " + std::to_string(groups) + ", topk_group " + std::to_string(kept) +
                ") is not supported: greedy top-k over all experts");
}

}  // namespace

void parse_moe_structure(const nlohmann::json& doc, ModelConfig& c) {
  const std::string& source = c.source;
  const config_json::Object f(doc, source, "", "a JSON object (a model config)");
  if (c.num_experts == 0) c.num_experts = f.u32("n_routed_experts").value_or(0);  // DeepSeek
  if (c.num_experts == 0) return;
  check_routing(f);
  if (c.shared_expert_intermediate_size == 0) {
    // DeepSeek: n_shared_experts experts of moe_intermediate_size, run as one ungated expert.
    const uint64_t shared = uint64_t{f.u32("n_shared_experts").value_or(0)} * c.moe_intermediate_size;
    if (shared > kMaxIntermediateSize) {
      config_json::error(source,
                         "n_shared_experts x moe_intermediate_size = " + std::to_string(shared) + " is too large");
    }
    c.shared_expert_intermediate_size = static_cast<uint32_t>(shared);
  }
  if (const auto factor = f.number("routed_scaling_factor")) {
    if (!(*factor > 0)) f.malformed("routed_scaling_factor", "a positive number", f.find("routed_scaling_factor"));
    c.routed_scaling_factor = *factor;
  }
  c.first_dense_layers = f.u32("first_k_dense_replace").value_or(0);
  c.moe_layer_freq = std::max(1u, f.u32("moe_layer_freq").value_or(1));
  c.decoder_sparse_step = std::max(1u, f.u32("decoder_sparse_step").value_or(1));
  c.mlp_only_layers = f.u32s("mlp_only_layers");
}

ModelConfig ModelConfig::for_layer(uint32_t layer) const {
  if (ffn_kind() != FfnKind::moe) return *this;
  const bool dense = layer < first_dense_layers || layer % moe_layer_freq != 0 || (layer + 1) % decoder_sparse_step != 0 ||
                     std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end();
  if (!dense) return *this;
  if (intermediate_size == 0) {
    config_json::error(source, "decoder layer " + std::to_string(layer) +
                                   " has a dense FFN, but intermediate_size is not set");
  }
  ModelConfig c = *this;
  c.source = source + " (layer " + std::to_string(layer) + ": dense)";
  c.num_experts = 0;
  c.num_experts_per_tok = 0;
  c.moe_intermediate_size = 0;
  c.shared_expert_intermediate_size = 0;
  c.routed_scaling_factor = 1.0;
  c.validate();
  return c;
}

}  // namespace metrale::layers
