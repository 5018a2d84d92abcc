// SPDX-License-Identifier: MIT OR Apache-2.0
// libFuzzer harness: config.json (the bounded JSON reader, then parse_model_config and the
// attention's parse_attention_config, rope settings included).
#include <metrale/json_file.hpp>
#include <metrale/log.hpp>
#include <metrale/status.hpp>

#include <attention/attention_config.hpp>
#include <io/config.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  metrale::logger()->set_level(spdlog::level::off);  // hidden_act "gelu" warns on every run
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json doc;
  try {
    doc = metrale::parse_json(text, "config.json");
  } catch (const metrale::Error&) {
    return 0;
  }
  try {
    const auto attention = metrale::layers::parse_attention_config(doc, "config.json");
    // What parse accepts, the attn kernels take.
    if (attention.head_dim != 64 && attention.head_dim != 128 && attention.head_dim != 256) __builtin_trap();
    if (attention.rope.rotary_dim == 0 || attention.rope.rotary_dim > attention.head_dim || attention.rope.rotary_dim % 2) __builtin_trap();
    if (attention.kv_heads == 0 || attention.q_heads % attention.kv_heads != 0) __builtin_trap();
  } catch (const metrale::Error&) {
  }
  try {
    const auto config = metrale::layers::parse_model_config(doc, "config.json");
    // What parse accepts, validate accepts, within the documented limits.
    config.validate();
    if (config.hidden_size > metrale::layers::kMaxHiddenSize) __builtin_trap();
    if (config.ffn_weight_bytes() > metrale::layers::kMaxFfnWeightBytes) __builtin_trap();
    (void)metrale::layers::gate_up_rows(config.intermediate_size);
    (void)config.to_json().dump();
  } catch (const metrale::Error&) {
    // Malformed input is an Error; anything else escaping is a finding.
  }
  return 0;
}
