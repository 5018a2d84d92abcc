// SPDX-License-Identifier: MIT OR Apache-2.0
// Llama, Mistral and Mixtral as transformers' modeling_llama / _mistral / _mixtral compute them:
// RMSNorm, attention with RoPE (no q/k norm), a SiLU-gated FFN; Mixtral's FFN a softmax top-k MoE
// whose weights are renormalised.
#include "architectures/specs.hpp"

namespace metrale::layers {

using namespace spec_parts;

namespace {

const ArchitectureSpec kLlama{
    .model_type = "llama",
    .description = "Llama 2/3: RMSNorm, GQA attention with RoPE (default or llama3 scaling), SiLU-gated FFN",
    .classes = {"LlamaForCausalLM"},
    .decode_refusal = {},
    .mixers = {TokenMixer::full_attention},
    .ffns = {FfnKind::dense},
    .qk_norm = false,
    .attention_bias = AttentionBias::all_key,
    .keys = {{"attention_bias", "true or false (q, k, v and o biases)", nullptr},
             {"mlp_bias", "true or false (gate, up and down biases)", nullptr}},
    .tensors = join(decoder_tensors(false), dense_ffn_tensors()),
};

const ArchitectureSpec kMistral{
    .model_type = "mistral",
    .description = "Mistral: Llama's layer without biases; a sliding window only where no context reaches it",
    .classes = {"MistralForCausalLM"},
    .decode_refusal = {},
    .mixers = {TokenMixer::full_attention},
    .ffns = {FfnKind::dense},
    .qk_norm = false,
    .attention_bias = AttentionBias::none,
    .keys = {{"sliding_window", "null, or at least max_position_embeddings", key_checks::sliding_window_inactive}},
    .tensors = join(decoder_tensors(false), dense_ffn_tensors()),
};

const ArchitectureSpec kMixtral{
    .model_type = "mixtral",
    .description = "Mixtral: Mistral's attention, a MoE FFN (softmax top-k, renormalised) of SiLU-gated experts",
    .classes = {"MixtralForCausalLM"},
    .decode_refusal = {},
    .mixers = {TokenMixer::full_attention},
    .ffns = {FfnKind::moe},
    .qk_norm = false,
    .attention_bias = AttentionBias::none,
    .keys = join({{"sliding_window", "null, or at least max_position_embeddings", key_checks::sliding_window_inactive}},
                 moe_keys()),
    .tensors = join(join(decoder_tensors(false), qwen_moe_tensors(false)),
                    {{"model.layers.{L}.block_sparse_moe.gate", TensorKind::linear, "router (transformers 4)", TensorBias::none},
                     {"model.layers.{L}.block_sparse_moe.experts.{E}.w1", TensorKind::linear, "expert gate (transformers 4)"},
                     {"model.layers.{L}.block_sparse_moe.experts.{E}.w3", TensorKind::linear, "expert up (transformers 4)"},
                     {"model.layers.{L}.block_sparse_moe.experts.{E}.w2", TensorKind::linear, "expert down (transformers 4)"}}),
};

}  // namespace

std::vector<const ArchitectureSpec*> llama_specs() { return {&kLlama, &kMistral, &kMixtral}; }

}  // namespace metrale::layers
