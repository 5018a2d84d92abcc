// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/checkpoint.hpp"

#include "io/config_json.hpp"
#include "io/ffn_names.hpp"
#include "io/linear_reader.hpp"

#include "io/tensor_source.hpp"

#include <metrale/json_file.hpp>
#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace metrale::layers {

namespace fs = std::filesystem;

namespace {

// gate and up fused; down's act-order permutation folded into the fused rows' order, so the
// activation comes out in the column order down reads and down keeps no permutation.
struct FfnProjections {
  QuantMatrix gate_up;
  QuantMatrix down;
  std::vector<uint16_t> gate_up_bias;  // empty unless read with biases
  std::vector<uint16_t> down_bias;
};

// `biases`: gate, up and down carry ".bias" tensors (bf16 after reading), kept in row order.
FfnProjections read_ffn(const TensorSource& src, const std::string& prefix, const FfnNames& names, uint32_t hidden,
                        uint32_t inter, const CheckpointQuant& q, bool biases = false) {
  QuantMatrix gate = read_linear(src, prefix + names.gate, inter, hidden, q);
  QuantMatrix up = read_linear(src, prefix + names.up, inter, hidden, q);
  QuantMatrix down = read_linear(src, prefix + names.down, hidden, inter, q);
  std::vector<uint16_t> gate_bias, up_bias, down_bias;
  if (biases) {
    gate_bias = read_bf16_tensor(src, prefix + names.gate + ".bias", {inter});
    up_bias = read_bf16_tensor(src, prefix + names.up + ".bias", {inter});
    down_bias = read_bf16_tensor(src, prefix + names.down + ".bias", {hidden});
  }
  // A W4A16 projection beside a zero-point one (scales of different dtypes, say): one format.
  for (QuantMatrix* m : {&gate, &up, &down}) {
    if (m->format == WeightFormat::w4a16 && (gate.format == WeightFormat::w4_zp || up.format == WeightFormat::w4_zp ||
                                             down.format == WeightFormat::w4_zp)) {
      *m = to_w4_zp(*m);
    }
  }
  if (!down.perm.empty()) {
    for (QuantMatrix* m : {&gate, &up}) {
      if (m->format == WeightFormat::w4a16) *m = to_w4_zp(*m);  // a permuted set runs the zero-point family
      reorder_rows(*m, down.perm);
    }
    // The biases follow their rows.
    for (std::vector<uint16_t>* b : {&gate_bias, &up_bias}) {
      if (b->empty()) continue;
      const std::vector<uint16_t> original = *b;
      for (size_t r = 0; r < b->size(); ++r) (*b)[r] = original[static_cast<size_t>(down.perm[r])];
    }
    down.perm.clear();
  }
  gate_bias.insert(gate_bias.end(), up_bias.begin(), up_bias.end());
  return FfnProjections{concat_rows(prefix + names.gate + "+" + names.up, gate, up), std::move(down), std::move(gate_bias),
                        std::move(down_bias)};
}

DenseFfnWeights dense_weights(FfnProjections&& p) {
  return DenseFfnWeights{std::move(p.gate_up), std::move(p.down), std::move(p.gate_up_bias), std::move(p.down_bias)};
}

// The experts' combine weights scaled by routed_scaling_factor equal their down projections
// scaled: fold it into the down scales (f32; W4A16's fp16 scales are widened first, exactly).
// The experts' projections share one format: gate_up is widened with down.
void fold_routed_scale(QuantMatrix& gate_up, QuantMatrix& down, double factor) {
  if (factor == 1.0) return;
  if (down.format == WeightFormat::w4a16) {
    gate_up = to_w4_zp(gate_up);
    down = to_w4_zp(down);
  }
  for (auto& s : down.scales32) s = static_cast<float>(static_cast<double>(s) * factor);
}

MoeWeights moe_weights(const TensorSource& src, const FfnNames& names, const ModelConfig& c, const CheckpointQuant& q) {
  MoeWeights m;
  m.experts = c.num_experts;
  m.hidden = c.hidden_size;
  m.router = read_float_linear(src, names.router, c.num_experts, c.hidden_size, q);
  if (names.fused_experts) {
    // Gate rows first, then up: the fused layout is already the one metrale runs.
    const std::string gate_up = names.experts() + "gate_up_proj", down = names.experts() + "down_proj";
    m.gate_up = stack_matrices(gate_up, read_fused_experts(src, gate_up, c.num_experts, gate_up_rows(c.moe_intermediate_size),
                                                           c.hidden_size, q));
    m.down = stack_matrices(down, read_fused_experts(src, down, c.num_experts, c.hidden_size, c.moe_intermediate_size, q));
  } else {
    std::vector<QuantMatrix> gate_up, down;
    for (uint32_t e = 0; e < c.num_experts; ++e) {
      FfnProjections p = read_ffn(src, names.expert(e), names, c.hidden_size, c.moe_intermediate_size, q);
      gate_up.push_back(std::move(p.gate_up));
      down.push_back(std::move(p.down));
    }
    m.gate_up = stack_matrices(names.experts() + "*." + names.gate + "+" + names.up, std::move(gate_up));
    m.down = stack_matrices(names.experts() + "*." + names.down, std::move(down));
  }
  fold_routed_scale(m.gate_up, m.down, c.routed_scaling_factor);
  if (!names.shared.empty()) {
    m.shared_expert = dense_weights(read_ffn(src, names.shared, FfnNames{}, c.hidden_size, c.shared_expert_intermediate_size, q));
    if (src.contains(names.shared_gate + ".weight") || src.contains(names.shared_gate + ".qweight")) {
      m.shared_expert_gate = read_float_linear(src, names.shared_gate, 1, c.hidden_size, q);
    }
  }
  return m;
}

}  // namespace

fs::path checkpoint_directory(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return path;
  return path.has_parent_path() ? path.parent_path() : fs::path(".");
}

CheckpointFiles open_checkpoint(const fs::path& path, const ConfigCheck& check_config) {
  CheckpointFiles files;
  files.path = path;
  files.directory = checkpoint_directory(path);
  const fs::path config = files.directory / "config.json";
  files.config_source = config.string();
  std::error_code ec;
  if (fs::exists(config, ec)) files.config = read_json_file(config, "model config", kMaxConfigBytes);
  if (check_config) check_config(files.config ? &*files.config : nullptr, files.config_source);
  files.tensors = std::make_shared<const TensorSource>(path);
  return files;
}

namespace {

// The quantization_config of a config.json document, else the sidecar quantize_config.json.
std::optional<CheckpointQuant> checkpoint_quant(const nlohmann::json* config, const std::string& config_source,
                                                const fs::path& directory) {
  if (config) {
    const config_json::Object root(*config, config_source, "", "a JSON object (the model config)");
    if (const nlohmann::json* declared = root.find("quantization_config")) return parse_quant_config(*declared, config_source);
  }
  // Older GPTQ tools write the settings only beside the weights, as the whole file.
  const fs::path sidecar = directory / "quantize_config.json";
  std::error_code ec;
  if (fs::exists(sidecar, ec)) {
    nlohmann::json doc = read_json_file(sidecar, "GPTQ quantize config", kMaxConfigBytes);
    if (!config_json::Object(doc, sidecar.string(), "", "a JSON object (the GPTQ settings)").has("quant_method")) {
      doc["quant_method"] = "gptq";
    }
    return parse_quant_config(doc, sidecar.string(), "");
  }
  return std::nullopt;
}

// A checkpoint without a quantization declaration: every linear weight unquantized, in the
// torch_dtype config.json declares (transformers 5 writes it as dtype).
CheckpointQuant unquantized_declaration(const CheckpointFiles& files) {
  CheckpointQuant q;
  q.source = files.config_source;
  q.path = "";
  if (files.config) {
    const config_json::Object root(*files.config, files.config_source, "", "a JSON object (the model config)");
    for (const char* field : {"torch_dtype", "dtype"}) {
      const nlohmann::json* declared = root.find(field);
      if (declared && declared->is_string()) {
        q.torch_dtype = declared->get<std::string>();
        break;
      }
    }
  }
  return q;
}

}  // namespace

std::optional<CheckpointQuant> read_checkpoint_quant(const fs::path& directory) {
  const fs::path config = directory / "config.json";
  std::error_code ec;
  std::optional<nlohmann::json> doc;
  if (fs::exists(config, ec)) doc = read_json_file(config, "model config", kMaxConfigBytes);
  return checkpoint_quant(doc ? &*doc : nullptr, config.string(), directory);
}

std::optional<CheckpointQuant> read_checkpoint_quant(const CheckpointFiles& files) {
  return checkpoint_quant(files.config ? &*files.config : nullptr, files.config_source, files.directory);
}

CheckpointQuant checkpoint_declaration(const CheckpointFiles& files) {
  const auto declared = read_checkpoint_quant(files);
  return declared ? *declared : unquantized_declaration(files);
}

LoadedCheckpoint load_checkpoint(const fs::path& path, std::optional<uint32_t> layer, const std::optional<ModelConfig>& config) {
  return load_checkpoint(open_checkpoint(path), layer, config);
}

LoadedCheckpoint load_checkpoint(const CheckpointFiles& files, std::optional<uint32_t> layer,
                                 const std::optional<ModelConfig>& config, const CheckpointQuant* declared) {
  const TensorSource& src = *files.tensors;
  LoadedCheckpoint out;
  out.description = src.description();
  const std::vector<uint32_t> layers = ffn_layers(src);
  out.quant = declared ? *declared : checkpoint_declaration(files);
  out.layer = layer.value_or(layers.front());
  if (!config && !files.config) {
    throw Error(Status::not_found, files.config_source + ": no model config beside " + src.description());
  }
  const ModelConfig model = config ? *config : parse_model_config(*files.config, files.config_source);
  out.config = model.for_layer(out.layer);
  const FfnNames names = ffn_names(src, out.config, out.layer);
  out.weights.kind = out.config.ffn_kind();
  if (out.weights.kind == FfnKind::dense) {
    out.weights.dense = dense_weights(
        read_ffn(src, names.block, names, out.config.hidden_size, out.config.intermediate_size, out.quant, out.config.mlp_bias));
  } else if (out.weights.kind == FfnKind::moe) {
    out.weights.moe = moe_weights(src, names, out.config, out.quant);
    out.config.routed_scaling_factor = 1.0;  // folded into the experts' down projections
  }
  out.weights.validate(out.config);
  return out;
}

std::optional<ActivationQuant> declared_activation_tier(const CheckpointQuant& quant) noexcept {
  switch (quant.activations) {
    case DeclaredActivations::bf16: return std::nullopt;
    case DeclaredActivations::int8_dynamic_token:
    case DeclaredActivations::int8_static_tensor: return ActivationQuant::int8;
    case DeclaredActivations::fp8_static_tensor:
    case DeclaredActivations::fp8_dynamic_token:
    case DeclaredActivations::fp8_dynamic_group128: return ActivationQuant::fp8;
  }
  return std::nullopt;
}

ActivationScaling declared_activation_scaling(const CheckpointQuant& quant) noexcept {
  ActivationScaling s;
  s.group128 = quant.activations == DeclaredActivations::fp8_dynamic_group128;
  s.static_tensor = static_activation_scales(quant.activations);
  // compressed-tensors quantizes activations with torch in the model's dtype; transformers' and
  // DeepSeek's block-FP8 quantizer computes in f32, as metrale's own contract does.
  if (quant.method == QuantMethod::compressed_tensors) s.arithmetic = ScaleArithmetic::bf16;
  return s;
}

}  // namespace metrale::layers
