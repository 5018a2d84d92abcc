// SPDX-License-Identifier: MIT OR Apache-2.0
// Qwen3 and Qwen3-MoE as transformers' modeling_qwen3 / _qwen3_moe compute them: RMSNorm over each
// q and k head before RoPE, no biases unless attention_bias; Qwen3-MoE's FFN a softmax top-k MoE
// (renormalised when norm_topk_prob) without a shared expert.
#include "architectures/specs.hpp"

namespace metrale::layers {

using namespace spec_parts;

namespace {

const ArchitectureSpec kQwen3{
    .model_type = "qwen3",
    .description = "Qwen3: RMSNorm, GQA attention with q/k norm per head and RoPE (default or yarn), SiLU-gated FFN",
    .classes = {"Qwen3ForCausalLM"},
    .decode_refusal = {},
    .mixers = {TokenMixer::full_attention},
    .ffns = {FfnKind::dense},
    .qk_norm = true,
    .attention_bias = AttentionBias::all_key,
    .keys = join(qwen_attention_keys(), {{"attention_bias", "true or false (q, k, v and o biases)", nullptr}}),
    .tensors = join(decoder_tensors(true), dense_ffn_tensors()),
};

const ArchitectureSpec kQwen3Moe{
    .model_type = "qwen3_moe",
    .description = "Qwen3-MoE: Qwen3's attention, MoE FFN (softmax top-k, norm_topk_prob), dense on mlp_only_layers",
    .classes = {"Qwen3MoeForCausalLM"},
    .decode_refusal = {},
    .mixers = {TokenMixer::full_attention},
    .ffns = {FfnKind::dense, FfnKind::moe},
    .qk_norm = true,
    .attention_bias = AttentionBias::all_key,
    .keys = join(join(qwen_attention_keys(), moe_keys()), {{"attention_bias", "true or false (q, k, v and o biases)", nullptr}}),
    .tensors = join(join(decoder_tensors(true), dense_ffn_tensors()), qwen_moe_tensors(false)),
};

}  // namespace

std::vector<const ArchitectureSpec*> qwen3_specs() { return {&kQwen3, &kQwen3Moe}; }

}  // namespace metrale::layers
