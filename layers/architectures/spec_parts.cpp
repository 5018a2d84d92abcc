// SPDX-License-Identifier: MIT OR Apache-2.0
#include "architectures/specs.hpp"

#include "io/config_json.hpp"

namespace metrale::layers::spec_parts {

using config_json::Object;

namespace {

void layer_types_checked(const Object&, std::string_view) {}  // entries checked against the mixers (registry.cpp)

}  // namespace

std::vector<TensorEntry> decoder_tensors(bool qk_norm) {
  std::vector<TensorEntry> t{
      {"model.embed_tokens.weight", TensorKind::vector, "token embedding", TensorBias::none},
      {"model.norm.weight", TensorKind::vector, "final norm", TensorBias::none},
      {"lm_head", TensorKind::linear, "logits projection (absent when tie_word_embeddings)", TensorBias::none},
      {"model.layers.{L}.input_layernorm.weight", TensorKind::vector, "norm before the mixer", TensorBias::none},
      {"model.layers.{L}.post_attention_layernorm.weight", TensorKind::vector, "norm before the FFN", TensorBias::none},
      {"model.layers.{L}.self_attn.q_proj", TensorKind::linear, "attention q", TensorBias::qkv},
      {"model.layers.{L}.self_attn.k_proj", TensorKind::linear, "attention k", TensorBias::qkv},
      {"model.layers.{L}.self_attn.v_proj", TensorKind::linear, "attention v", TensorBias::qkv},
      {"model.layers.{L}.self_attn.o_proj", TensorKind::linear, "attention output", TensorBias::o},
  };
  if (qk_norm) {
    t.push_back({"model.layers.{L}.self_attn.q_norm.weight", TensorKind::vector, "q norm per head", TensorBias::none});
    t.push_back({"model.layers.{L}.self_attn.k_norm.weight", TensorKind::vector, "k norm per head", TensorBias::none});
  }
  return t;
}

std::vector<TensorEntry> dense_ffn_tensors() {
  return {{"model.layers.{L}.mlp.gate_proj", TensorKind::linear, "FFN gate", TensorBias::mlp},
          {"model.layers.{L}.mlp.up_proj", TensorKind::linear, "FFN up", TensorBias::mlp},
          {"model.layers.{L}.mlp.down_proj", TensorKind::linear, "FFN down", TensorBias::mlp}};
}

std::vector<TensorEntry> qwen_moe_tensors(bool shared_expert) {
  std::vector<TensorEntry> t{
      {"model.layers.{L}.mlp.gate", TensorKind::linear, "router", TensorBias::none},
      {"model.layers.{L}.mlp.experts.{E}.gate_proj", TensorKind::linear, "expert gate", TensorBias::none},
      {"model.layers.{L}.mlp.experts.{E}.up_proj", TensorKind::linear, "expert up", TensorBias::none},
      {"model.layers.{L}.mlp.experts.{E}.down_proj", TensorKind::linear, "expert down", TensorBias::none},
      {"model.layers.{L}.mlp.experts.gate_up_proj", TensorKind::fused_experts, "experts' gate and up, fused [E, 2I, H]", TensorBias::none},
      {"model.layers.{L}.mlp.experts.down_proj", TensorKind::fused_experts, "experts' down, fused [E, H, I]", TensorBias::none},
  };
  if (shared_expert) {
    t.push_back({"model.layers.{L}.mlp.shared_expert.gate_proj", TensorKind::linear, "shared expert gate", TensorBias::none});
    t.push_back({"model.layers.{L}.mlp.shared_expert.up_proj", TensorKind::linear, "shared expert up", TensorBias::none});
    t.push_back({"model.layers.{L}.mlp.shared_expert.down_proj", TensorKind::linear, "shared expert down", TensorBias::none});
    t.push_back({"model.layers.{L}.mlp.shared_expert_gate", TensorKind::linear, "shared expert's sigmoid gate", TensorBias::none});
  }
  return t;
}

std::vector<HonouredKey> moe_keys() {
  return {{"num_experts", "up to 4096", nullptr},
          {"num_local_experts", "up to 4096 (Mixtral's and transformers 5's name)", nullptr},
          {"num_experts_per_tok", "1 .. the experts", nullptr},
          {"moe_intermediate_size", "a multiple of 128", nullptr},
          {"norm_topk_prob", "true or false", nullptr},
          {"decoder_sparse_step", "any (MoE where (layer + 1) % step == 0)", nullptr},
          {"mlp_only_layers", "any (dense layers)", nullptr}};
}

std::vector<HonouredKey> qwen_attention_keys() {
  return {{"use_sliding_window", "false", key_checks::must_be_false},
          {"sliding_window", "any while use_sliding_window is false", key_checks::sliding_window_inactive},
          {"max_window_layers", "any while use_sliding_window is false", nullptr},
          {"layer_types", "full_attention entries", layer_types_checked}};
}

std::vector<TensorEntry> join(std::vector<TensorEntry> a, const std::vector<TensorEntry>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<HonouredKey> join(std::vector<HonouredKey> a, const std::vector<HonouredKey>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace metrale::layers::spec_parts
