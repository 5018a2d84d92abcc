// SPDX-License-Identifier: MIT OR Apache-2.0
// The self-attention part of a model (docs/layers.md, "The decoder"), from a Hugging Face
// config.json: heads, head width, biases, Qwen3's per-head q/k RMSNorm and the rotary embedding,
// as transformers' Llama, Mistral/Mixtral, Qwen2, Qwen2-MoE, Qwen3 and Qwen3-MoE modeling code
// reads them. A plain value.
#pragma once

#include "attention/rope.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace metrale::layers {

struct AttentionConfig {
  std::string source;      // config.json's path, for messages
  std::string model_type;  // "qwen3", "llama", ...
  uint32_t hidden_size = 0;
  uint32_t q_heads = 0;    // num_attention_heads
  uint32_t kv_heads = 0;   // num_key_value_heads (default: q_heads)
  uint32_t head_dim = 0;   // head_dim (default: hidden_size / num_attention_heads)
  bool qkv_bias = false;   // q_proj, k_proj and v_proj carry a bias (the spec's AttentionBias)
  bool o_bias = false;     // o_proj carries one (attention_bias: Llama, Qwen3)
  bool qk_norm = false;    // the spec's: RMSNorm over head_dim of every q and k head before RoPE
  bool zero_centred_norm = false;  // the q/k norm is x/rms(x) * (1 + w) (Qwen3.5, Qwen3-Next)
  bool output_gate = false;        // q_proj rows per head [q ; gate], output o_proj(attn * sigmoid(gate))
  float rms_norm_eps = 1e-6f;
  RopeConfig rope;

  uint32_t q_width() const noexcept { return q_heads * head_dim; }
  uint32_t kv_width() const noexcept { return kv_heads * head_dim; }
  // The score scale: head_dim^-0.5 (every family here).
  float scale() const noexcept;
};

// Reads the keys above from a config.json document; the biases and the q/k norm are what the
// architecture's spec (architectures/architecture.hpp) says, and its refusals come first (an
// unknown model_type, an active sliding window, ...). Error(invalid_argument) naming the key for
// a malformed or missing value (num_attention_heads, hidden_size) or heads that do not divide;
// Refusal for what the attention kernels do not run: head_dim other than 64, 128 or 256, and the
// rope types rope.hpp refuses. Partial rotary (rope.rotary_dim < head_dim) where the spec allows it.
AttentionConfig parse_attention_config(const nlohmann::json& doc, const std::string& source);

}  // namespace metrale::layers
