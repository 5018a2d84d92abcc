// SPDX-License-Identifier: MIT OR Apache-2.0
#include "attention/attention_config.hpp"

#include "architectures/architecture.hpp"
#include "io/config_json.hpp"

#include <metrale/status.hpp>

#include <cmath>

namespace metrale::layers {

namespace {

using config_json::Object;

uint32_t required_u32(const Object& root, const char* key) {
  const auto v = root.u32(key);
  if (!v || *v == 0) root.malformed(key, "a positive integer", root.find(key));
  return *v;
}

}  // namespace

float AttentionConfig::scale() const noexcept { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))); }

AttentionConfig parse_attention_config(const nlohmann::json& doc, const std::string& source) {
  const Object root(doc, source, "", "a JSON object (the model config)");
  // What the architecture's spec says; its refusals come before any shape is read.
  const ResolvedArchitecture arch = resolve_architecture(doc, source, ArchitectureUse::decoder, /*warn=*/false);
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
  c.rope = parse_rope_config(doc, source, arch.spec->default_partial_rotary_factor);
  c.head_dim = c.rope.head_dim;
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256) {
    throw Refusal(root.where("head_dim") + " = " + std::to_string(c.head_dim) +
                  " is not supported: the attn kernels run head_dim 64, 128 or 256");
  }
  c.qkv_bias = arch.qkv_bias;
  c.o_bias = arch.o_bias;
  c.qk_norm = arch.spec->qk_norm;
  c.zero_centred_norm = arch.spec->zero_centred_norms;
  c.output_gate = arch.spec->attention_output_gate;
  if (const auto eps = root.number("rms_norm_eps")) {
    if (!(*eps >= 0)) root.malformed("rms_norm_eps", "a non-negative number", root.find("rms_norm_eps"));
    c.rms_norm_eps = static_cast<float>(*eps);
  }
  return c;
}

}  // namespace metrale::layers
