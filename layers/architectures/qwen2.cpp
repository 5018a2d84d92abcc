// SPDX-License-Identifier: MIT OR Apache-2.0
// Qwen2 and Qwen2-MoE as transformers' modeling_qwen2 / _qwen2_moe compute them: Llama's layer with
// q/k/v biases; Qwen2-MoE's FFN a softmax top-k MoE plus a shared expert under a sigmoid gate,
// dense on mlp_only_layers and off the decoder_sparse_step.
#include "architectures/specs.hpp"

namespace metrale::layers {

using namespace spec_parts;

namespace {

const ArchitectureSpec kQwen2{
    .model_type = "qwen2",
    .description = "Qwen2 / Qwen2.5: RMSNorm, GQA attention with q/k/v biases and RoPE, SiLU-gated FFN",
    .classes = {"Qwen2ForCausalLM"},
    .decode_refusal = {},
    .mixers = {TokenMixer::full_attention},
    .ffns = {FfnKind::dense},
    .qk_norm = false,
    .attention_bias = AttentionBias::qkv,
    .keys = qwen_attention_keys(),
    .tensors = join(decoder_tensors(false), dense_ffn_tensors()),
};

const ArchitectureSpec kQwen2Moe{
    .model_type = "qwen2_moe",
    .description = "Qwen1.5-MoE / Qwen2-MoE: Qwen2's attention (qkv_bias), MoE FFN with a gated shared expert",
    .classes = {"Qwen2MoeForCausalLM"},
    .decode_refusal = {},
    .mixers = {TokenMixer::full_attention},
    .ffns = {FfnKind::dense, FfnKind::moe},
    .qk_norm = false,
    .attention_bias = AttentionBias::qkv_key,
    .keys = join(join(qwen_attention_keys(), moe_keys()),
                 {{"qkv_bias", "true or false (q, k and v biases; default true)", nullptr},
                  {"shared_expert_intermediate_size", "a multiple of 128", nullptr}}),
    .tensors = join(join(decoder_tensors(false), dense_ffn_tensors()), qwen_moe_tensors(true)),
};

}  // namespace

std::vector<const ArchitectureSpec*> qwen2_specs() { return {&kQwen2, &kQwen2Moe}; }

}  // namespace metrale::layers
