// SPDX-License-Identifier: MIT OR Apache-2.0
// DeepSeek-V2 / V3: their FFN layers only (`metrale run`): dense below first_k_dense_replace, else
// a MoE with ungated shared experts and routed_scaling_factor. Their attention (multi-head latent
// attention) is not implemented, so nothing decodes them.
#include "architectures/specs.hpp"

namespace metrale::layers {

using namespace spec_parts;

namespace {

std::vector<TensorEntry> deepseek_ffn_tensors() {
  return join(join(dense_ffn_tensors(), qwen_moe_tensors(false)),
              {{"model.layers.{L}.mlp.shared_experts.gate_proj", TensorKind::linear, "shared experts' gate", TensorBias::none},
               {"model.layers.{L}.mlp.shared_experts.up_proj", TensorKind::linear, "shared experts' up", TensorBias::none},
               {"model.layers.{L}.mlp.shared_experts.down_proj", TensorKind::linear, "shared experts' down", TensorBias::none}});
}

constexpr std::string_view kMla =
    "its attention is multi-head latent attention (MLA), which metrale does not implement; `metrale run` runs its FFN layers";

std::vector<HonouredKey> deepseek_ffn_keys() {
  return join(moe_keys(), {{"n_routed_experts", "up to 4096", nullptr},
                           {"n_shared_experts", "any (one ungated expert of n x moe_intermediate_size)", nullptr},
                           {"routed_scaling_factor", "positive", nullptr},
                           {"scoring_func", "softmax", nullptr},
                           {"topk_method", "greedy, or group_limited_greedy keeping every group", nullptr},
                           {"n_group", "any", nullptr},
                           {"topk_group", "any", nullptr},
                           {"first_k_dense_replace", "any (dense layers below it)", nullptr},
                           {"moe_layer_freq", "any", nullptr}});
}

// V2 and V3 differ, for their FFN, only in the routing V3 adds (sigmoid scoring, refused by the
// FFN's parser): one spec shape for both.
ArchitectureSpec ffn_only_spec(std::string_view model_type, std::string_view description, std::string_view cls) {
  return {.model_type = model_type,
          .description = description,
          .classes = {cls},
          .decode_refusal = kMla,
          .mixers = {},  // the attention is not run
          .ffns = {FfnKind::dense, FfnKind::moe},
          .qk_norm = false,
          .attention_bias = AttentionBias::none,
          .keys = deepseek_ffn_keys(),
          .tensors = deepseek_ffn_tensors()};
}

const ArchitectureSpec kDeepseekV2 =
    ffn_only_spec("deepseek_v2", "DeepSeek-V2: FFN layers only (dense, MoE with shared experts)", "DeepseekV2ForCausalLM");
const ArchitectureSpec kDeepseekV3 = ffn_only_spec(
    "deepseek_v3", "DeepSeek-V3: FFN layers only (dense, MoE with shared experts; sigmoid routing refused)", "DeepseekV3ForCausalLM");

}  // namespace

std::vector<const ArchitectureSpec*> deepseek_specs() { return {&kDeepseekV2, &kDeepseekV3}; }

}  // namespace metrale::layers
