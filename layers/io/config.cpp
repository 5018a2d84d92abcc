// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/config.hpp"
#include "io/config_json.hpp"

#include "core/checked.hpp"
#include "core/w4a16.hpp"

#include <metrale/json_file.hpp>
#include <metrale/log.hpp>
#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <limits>
#include <system_error>

namespace metrale::layers {

const char* activation_name(Activation act) noexcept { return act == Activation::silu ? "silu" : "gelu_tanh"; }

const char* ffn_kind_name(FfnKind kind) noexcept {
  switch (kind) {
    case FfnKind::none: return "none";
    case FfnKind::dense: return "dense";
    case FfnKind::moe: return "moe";
  }
  return "none";
}

FfnKind ModelConfig::ffn_kind() const noexcept {
  if (num_experts > 0) return FfnKind::moe;
  if (intermediate_size > 0) return FfnKind::dense;
  return FfnKind::none;
}

namespace {

// A shape the kernels cannot run is a Refusal: the config is well formed, metrale lacks the variant.
void need_multiple(const std::string& source, std::string_view key, uint32_t value, std::string_view why) {
  if (value % kW4a16GroupSize != 0) {
    throw Refusal(source + ": " + std::string(key) + " = " + std::to_string(value) + " is not a multiple of 128: it is K of " +
                  std::string(why) + ", and W4A16 keeps one scale per 128 values along K");
  }
}

void need_at_most(const std::string& source, std::string_view key, uint32_t value, uint32_t max) {
  if (value > max) {
    config_json::error(source, std::string(key) + " = " + std::to_string(value) + " is too large: at most " +
                                   std::to_string(max) + " (docs/layers.md, \"Limits\")");
  }
}

uint64_t saturating_mul(uint64_t a, uint64_t b) noexcept { return checked_mul(a, b).value_or(UINT64_MAX); }
uint64_t saturating_add(uint64_t a, uint64_t b) noexcept { return checked_add(a, b).value_or(UINT64_MAX); }

// One W4A16 matrix [n, k]: 4-bit codes and one fp16 scale per 128 values.
uint64_t w4a16_bytes(uint64_t n, uint64_t k) noexcept {
  return saturating_add(saturating_mul(n, k / 2), saturating_mul(saturating_mul(n, k / kW4a16GroupSize), 2));
}

uint64_t dense_ffn_bytes(uint64_t hidden, uint64_t inter) noexcept {
  return saturating_add(w4a16_bytes(2 * inter, hidden), w4a16_bytes(hidden, inter));
}

std::string gib_text(uint64_t bytes) {
  if (bytes == UINT64_MAX) return "more than 2^64 bytes";
  const double gib = static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30);
  char text[64];
  std::snprintf(text, sizeof text, "%.1f GiB", gib);
  return text;
}

Activation parse_activation(const config_json::Object& f, const std::string& name) {
  if (name == "silu" || name == "swish") return Activation::silu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast") return Activation::gelu_tanh;
  if (name == "gelu") {
    // The act kernels implement the tanh form only; it differs from erf-GELU by < 1e-3.
    logger()->warn("{}: hidden_act 'gelu' (erf) is computed with the tanh approximation", f.file());
    return Activation::gelu_tanh;
  }
  f.unsupported("hidden_act", nlohmann::json(name), "silu, swish, gelu, gelu_pytorch_tanh, gelu_new or gelu_fast");
}

}  // namespace

uint32_t gate_up_rows(uint32_t intermediate) {
  const auto rows = checked_mul<uint32_t>(intermediate, 2);
  if (!rows) {
    throw Error(Status::invalid_argument, "gate+up projection of intermediate size " + std::to_string(intermediate) +
                                              ": 2 x " + std::to_string(intermediate) + " rows do not fit in 32 bits");
  }
  return *rows;
}

uint64_t ModelConfig::ffn_weight_bytes() const noexcept {
  switch (ffn_kind()) {
    case FfnKind::none: return 0;
    case FfnKind::dense: return dense_ffn_bytes(hidden_size, intermediate_size);
    case FfnKind::moe: {
      uint64_t total = saturating_mul(num_experts, dense_ffn_bytes(hidden_size, moe_intermediate_size));
      total = saturating_add(total, saturating_mul(saturating_mul(num_experts, hidden_size), 4));  // f32 router
      if (shared_expert_intermediate_size > 0) {
        total = saturating_add(total, dense_ffn_bytes(hidden_size, shared_expert_intermediate_size));
        total = saturating_add(total, uint64_t{hidden_size} * 4);  // f32 shared expert gate
      }
      return total;
    }
  }
  return 0;
}

void ModelConfig::validate() const {
  if (hidden_size == 0) config_json::error(source, "hidden_size must be set and positive");
  need_at_most(source, "hidden_size", hidden_size, kMaxHiddenSize);
  need_at_most(source, "intermediate_size", intermediate_size, kMaxIntermediateSize);
  need_at_most(source, "moe_intermediate_size", moe_intermediate_size, kMaxIntermediateSize);
  need_at_most(source, "shared_expert_intermediate_size", shared_expert_intermediate_size, kMaxIntermediateSize);
  need_at_most(source, "num_experts", num_experts, kMaxExperts);
  need_multiple(source, "hidden_size", hidden_size, "every gate/up projection");
  switch (ffn_kind()) {
    case FfnKind::none: break;
    case FfnKind::dense: need_multiple(source, "intermediate_size", intermediate_size, "the down projection"); break;
    case FfnKind::moe:
      if (num_experts_per_tok == 0 || num_experts_per_tok > num_experts) {
        config_json::error(source, "num_experts_per_tok = " + std::to_string(num_experts_per_tok) +
                                       " must be in 1.." + std::to_string(num_experts) + " (num_experts)");
      }
      if (moe_intermediate_size == 0) config_json::error(source, "a MoE (num_experts > 0) needs moe_intermediate_size");
      need_multiple(source, "moe_intermediate_size", moe_intermediate_size, "each expert's down projection");
      if (shared_expert_intermediate_size != 0) {
        need_multiple(source, "shared_expert_intermediate_size", shared_expert_intermediate_size,
                      "the shared expert's down projection");
      }
      break;
  }
  if (const uint64_t bytes = ffn_weight_bytes(); bytes > kMaxFfnWeightBytes) {
    config_json::error(source, "the FFN's weights (W4A16 codes and scales, router) would take " + gib_text(bytes) +
                                   ", more than the " + gib_text(kMaxFfnWeightBytes) +
                                   " allowed: check hidden_size, the *intermediate_size keys and num_experts");
  }
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j{{"source", source},
                   {"model_type", model_type},
                   {"ffn", ffn_kind_name(ffn_kind())},
                   {"hidden_size", hidden_size},
                   {"hidden_act", hidden_act}};
  if (ffn_kind() == FfnKind::dense) j["intermediate_size"] = intermediate_size;
  if (mlp_bias) j["mlp_bias"] = true;
  if (ffn_kind() == FfnKind::moe) {
    j["num_experts"] = num_experts;
    j["num_experts_per_tok"] = num_experts_per_tok;
    j["moe_intermediate_size"] = moe_intermediate_size;
    j["norm_topk_prob"] = norm_topk_prob;
    j["shared_expert_intermediate_size"] = shared_expert_intermediate_size;
    if (routed_scaling_factor != 1.0) j["routed_scaling_factor"] = routed_scaling_factor;
  }
  return j;
}

ModelConfig parse_model_config(const nlohmann::json& doc, const std::string& source) {
  const config_json::Object f(doc, source, "", "a JSON object (a model config)");
  ModelConfig c;
  c.source = source;
  c.model_type = f.string("model_type").value_or("");
  const auto hidden = f.u32("hidden_size");
  if (!hidden) f.malformed("hidden_size", "a positive integer (the model width)", nullptr);
  c.hidden_size = *hidden;
  c.intermediate_size = f.u32("intermediate_size").value_or(0);
  c.hidden_act = f.string("hidden_act").value_or("silu");
  c.activation = parse_activation(f, c.hidden_act);
  auto experts = f.u32("num_experts");
  if (!experts) experts = f.u32("num_local_experts");  // Mixtral's name
  c.num_experts = experts.value_or(0);
  c.num_experts_per_tok = f.u32("num_experts_per_tok").value_or(0);
  c.moe_intermediate_size = f.u32("moe_intermediate_size").value_or(0);
  if (c.num_experts > 0 && c.moe_intermediate_size == 0 && f.has("num_local_experts")) {
    c.moe_intermediate_size = c.intermediate_size;  // Mixtral sizes its experts with intermediate_size
  }
  // Mixtral renormalises its top-k weights without saying so.
  c.norm_topk_prob = f.boolean("norm_topk_prob").value_or(f.has("num_local_experts"));
  c.shared_expert_intermediate_size = f.u32("shared_expert_intermediate_size").value_or(0);
  // The architecture spec decides who may set it (registry.cpp); the dense FFN reads it.
  c.mlp_bias = f.boolean("mlp_bias").value_or(false);
  parse_moe_structure(doc, c);
  c.validate();
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "config.json";
  return parse_model_config(read_json_file(file, "model config", kMaxConfigBytes), file.string());
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets{
      {"small-dense", "hidden 256, intermediate 512, silu: a fast dense FFN for tests"},
      {"small-dense-gelu", "hidden 384, intermediate 640, gelu (tanh): the GELU path, small"},
      {"small-moe", "hidden 256, 8 experts, 2 active, expert intermediate 256, renormalised, shared expert 384"},
      {"qwen3-32b", "Qwen3-32B's dense FFN: hidden 5120, intermediate 25600, silu"},
      {"qwen3-30b-a3b", "Qwen3-30B-A3B's MoE: hidden 2048, 128 experts, 8 active, expert intermediate 768"},
  };
  return kPresets;
}

std::optional<ModelConfig> preset_config(std::string_view name) {
  nlohmann::json doc;
  if (name == "small-dense") {
    doc = {{"model_type", "metrale_small"}, {"hidden_size", 256}, {"intermediate_size", 512}, {"hidden_act", "silu"}};
  } else if (name == "small-dense-gelu") {
    doc = {{"model_type", "metrale_small"}, {"hidden_size", 384}, {"intermediate_size", 640},
           {"hidden_act", "gelu_pytorch_tanh"}};
  } else if (name == "small-moe") {
    doc = {{"model_type", "metrale_small_moe"}, {"hidden_size", 256}, {"hidden_act", "silu"},
           {"num_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 256},
           {"norm_topk_prob", true}, {"shared_expert_intermediate_size", 384}};
  } else if (name == "qwen3-32b") {
    doc = {{"model_type", "qwen3"}, {"hidden_size", 5120}, {"intermediate_size", 25600}, {"hidden_act", "silu"}};
  } else if (name == "qwen3-30b-a3b") {
    doc = {{"model_type", "qwen3_moe"}, {"hidden_size", 2048}, {"intermediate_size", 6144}, {"hidden_act", "silu"},
           {"num_experts", 128}, {"num_experts_per_tok", 8}, {"moe_intermediate_size", 768},
           {"norm_topk_prob", true}};
  } else {
    return std::nullopt;
  }
  return parse_model_config(doc, "preset " + std::string(name));
}

ModelConfig resolve_model(std::string_view preset_or_path) {
  if (auto preset = preset_config(preset_or_path)) return *preset;
  std::filesystem::path path(preset_or_path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    std::string names;
    for (const auto& p : presets()) names += (names.empty() ? "" : ", ") + std::string(p.name);
    throw Error(Status::not_found, "model '" + std::string(preset_or_path) +
                                       "' is neither a preset (" + names + ") nor an existing config.json path");
  }
  return load_model_config(path);
}

}  // namespace metrale::layers
