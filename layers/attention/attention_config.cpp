// SPDX-License-Identifier: MIT OR Apache-2.0
#include "attention/attention_config.hpp"

#include "io/config_json.hpp"

#include <metrale/status.hpp>

#include <cmath>

namespace metrale::layers {

namespace {

using config_json::Object;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

uint32_t required_u32(const Object& root, const char* key) {
  const auto v = root.u32(key);
  if (!v || *v == 0) root.malformed(key, "a positive integer", root.find(key));
  return *v;
}

}  // namespace

float AttentionConfig::scale() const noexcept { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))); }

AttentionConfig parse_attention_config(const nlohmann::json& doc, const std::string& source) {
  const Object root(doc, source, "", "a JSON object (the model config)");
  AttentionConfig c;
  c.source = source;
  c.model_type = root.string("model_type").value_or("");
  c.hidden_size = required_u32(root, "hidden_size");
  c.q_heads = required_u32(root, "num_attention_heads");
  c.kv_heads = root.u32("num_key_value_heads").value_or(c.q_heads);
  if (c.kv_heads == 0 || c.q_heads % c.kv_heads != 0) {
    throw Error(Status::invalid_argument, root.where("num_key_value_heads") + " = " + std::to_string(c.kv_heads) +
                                              " does not divide num_attention_heads = " + std::to_string(c.q_heads));
  }
  if (c.q_heads / c.kv_heads > 128) {
    throw Refusal(root.where("num_attention_heads") + " = " + std::to_string(c.q_heads) + " is more than 128 times " +
                  "num_key_value_heads = " + std::to_string(c.kv_heads) + ": the attn kernels serve at most 128 q heads per kv head");
  }
  c.rope = parse_rope_config(doc, source);
  c.head_dim = c.rope.head_dim;
  if (c.head_dim != 64 && c.head_dim != 128) {
    throw Refusal(root.where("head_dim") + " = " + std::to_string(c.head_dim) +
                  " is not supported: the attn kernels run head_dim 64 or 128");
  }
  const bool qwen2 = starts_with(c.model_type, "qwen2");
  const bool attention_bias = root.boolean("attention_bias").value_or(false);
  c.qkv_bias = qwen2 || attention_bias;
  c.o_bias = !qwen2 && attention_bias;
  c.qk_norm = starts_with(c.model_type, "qwen3");
  if (const auto eps = root.number("rms_norm_eps")) {
    if (!(*eps >= 0)) root.malformed("rms_norm_eps", "a non-negative number", root.find("rms_norm_eps"));
    c.rms_norm_eps = static_cast<float>(*eps);
  }
  // A sliding window changes which keys a query sees once the context passes it.
  if (root.boolean("use_sliding_window").value_or(false)) {
    root.unsupported("use_sliding_window", *root.find("use_sliding_window"),
                     "metrale's attention is causal over the whole context (no sliding window)");
  }
  if (!starts_with(c.model_type, "qwen")) {
    if (const auto window = root.u32("sliding_window"); window && *window < c.rope.max_position_embeddings) {
      root.unsupported("sliding_window", *root.find("sliding_window"),
                       "metrale's attention is causal over the whole context (no sliding window below "
                       "max_position_embeddings)");
    }
  }
  return c;
}

}  // namespace metrale::layers
