// SPDX-License-Identifier: MIT OR Apache-2.0
// The FFN part of a model, from a Hugging Face style config.json or a named preset.
// Keys read: model_type, hidden_size, intermediate_size, hidden_act, num_experts (or Mixtral's
// num_local_experts), num_experts_per_tok, moe_intermediate_size, norm_topk_prob,
// shared_expert_intermediate_size. Anything malformed is a metrale::Error naming the source and key.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

enum class Activation { silu, gelu_tanh };
enum class FfnKind { none, dense, moe };

const char* activation_name(Activation act) noexcept;  // "silu" / "gelu_tanh"
const char* ffn_kind_name(FfnKind kind) noexcept;      // "none" / "dense" / "moe"

struct ModelConfig {
  std::string source;      // preset name or config.json path, for messages
  std::string model_type;  // e.g. "qwen3"; steers tgemm_probe_ok()
  uint32_t hidden_size = 0;
  uint32_t intermediate_size = 0;  // dense FFN width; 0: no dense FFN
  std::string hidden_act = "silu";
  Activation activation = Activation::silu;
  uint32_t num_experts = 0;        // > 0: the FFN is a MoE
  uint32_t num_experts_per_tok = 0;
  uint32_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;     // renormalise the top-k routing weights to sum to 1
  uint32_t shared_expert_intermediate_size = 0;  // 0: no shared expert

  FfnKind ffn_kind() const noexcept;
  // Throws Error(invalid_argument) when the shapes cannot form W4A16 layers.
  void validate() const;
  nlohmann::json to_json() const;
};

// Parses a config.json document; `source` names it in messages.
ModelConfig parse_model_config(const nlohmann::json& doc, const std::string& source);
ModelConfig load_model_config(const std::filesystem::path& path);

struct Preset {
  std::string_view name;
  std::string_view description;
};
const std::vector<Preset>& presets();
std::optional<ModelConfig> preset_config(std::string_view name);
// A preset name, else a path to a config.json (or a directory holding one).
ModelConfig resolve_model(std::string_view preset_or_path);

}  // namespace metrale::layers
