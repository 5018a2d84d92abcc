// SPDX-License-Identifier: MIT OR Apache-2.0
// The FFN part of a model, from a Hugging Face style config.json or a named preset.
// Keys read: model_type, hidden_size, intermediate_size, hidden_act, num_experts (or Mixtral's
// num_local_experts, DeepSeek's n_routed_experts), num_experts_per_tok, moe_intermediate_size,
// norm_topk_prob, shared_expert_intermediate_size (or DeepSeek's n_shared_experts), and the MoE
// routing and layer structure (routed_scaling_factor, scoring_func, topk_method, n_group,
// topk_group, first_k_dense_replace, moe_layer_freq, decoder_sparse_step, mlp_only_layers).
// Anything malformed is a metrale::Error naming the source and key; routing metrale does not
// implement (sigmoid scoring, group-limited top-k) is a Refusal.
// Shapes are limited (kMax* below, docs/layers.md): a few bytes of config.json must not be able to
// ask for terabytes of weights or shapes whose products wrap.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
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

// Limits on shapes, far above any released model (hidden 16384, expert width 2^15, 384 experts).
inline constexpr uint32_t kMaxHiddenSize = 65536;
inline constexpr uint32_t kMaxIntermediateSize = uint32_t{1} << 20;  // each *intermediate_size
inline constexpr uint32_t kMaxExperts = 4096;
// W4A16 codes and scales plus the router, of the whole FFN: one layer of the largest MoE is ~9 GiB.
inline constexpr uint64_t kMaxFfnWeightBytes = uint64_t{32} << 30;
// config.json is a few kilobytes.
inline constexpr std::size_t kMaxConfigBytes = std::size_t{4} << 20;

// The rows of a fused gate+up projection, 2 * intermediate. Throws Error(invalid_argument) when
// that does not fit in 32 bits (validate() keeps every config far below).
uint32_t gate_up_rows(uint32_t intermediate);

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
  bool mlp_bias = false;           // a dense FFN's gate, up and down carry biases (Llama's mlp_bias)
  uint32_t shared_expert_intermediate_size = 0;  // 0: no shared expert
  // DeepSeek-style routing: the routed experts' combine weights are multiplied by this.
  double routed_scaling_factor = 1.0;
  // Which decoder layers of a MoE model are dense (their FFN intermediate_size wide):
  uint32_t first_dense_layers = 0;         // DeepSeek first_k_dense_replace: layers below are dense
  uint32_t moe_layer_freq = 1;             // DeepSeek moe_layer_freq: MoE where layer % freq == 0
  uint32_t decoder_sparse_step = 1;        // Qwen-MoE: MoE where (layer + 1) % step == 0
  std::vector<uint32_t> mlp_only_layers;   // Qwen-MoE: dense whatever the step says

  FfnKind ffn_kind() const noexcept;
  // The FFN of decoder layer `layer`: this config, or for a dense layer of a MoE model its dense
  // FFN (num_experts 0, intermediate_size wide). Throws Error naming the source and layer when
  // that layer is dense but the config gives no intermediate_size.
  ModelConfig for_layer(uint32_t layer) const;
  // Throws Error(invalid_argument) naming the key when the shapes cannot form W4A16 layers or
  // exceed the limits above.
  void validate() const;
  // Bytes of the FFN's weights (W4A16 codes and scales, router, shared expert); saturates at
  // UINT64_MAX instead of wrapping.
  uint64_t ffn_weight_bytes() const noexcept;
  nlohmann::json to_json() const;
};

// The MoE keys of a config.json document into `config` (config_moe.cpp; parse_model_config calls it).
void parse_moe_structure(const nlohmann::json& doc, ModelConfig& config);

// Parses a config.json document; `source` names it in messages.
ModelConfig parse_model_config(const nlohmann::json& doc, const std::string& source);
// A config.json file (or a directory holding one): a regular file of at most kMaxConfigBytes,
// read with the bounded JSON reader (metrale/json_file.hpp). Errors name the file.
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
