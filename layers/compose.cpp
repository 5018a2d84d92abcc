// SPDX-License-Identifier: MIT OR Apache-2.0
#include "compose.hpp"

#include "architectures/architecture.hpp"
#include "engine/engine.hpp"
#include "io/checkpoint.hpp"
#include "io/tensor_source.hpp"

#include <metrale/json_file.hpp>
#include <metrale/lock.hpp>
#include <metrale/status.hpp>

#include <algorithm>
#include <filesystem>
#include <utility>

namespace metrale::layers {

namespace {

namespace fs = std::filesystem;

// The formats a request asks synthetic weights to be made in.
SyntheticFormats asked_formats(const LayerRequest& request, WeightTierRequest& asked) {
  asked = weight_tier_request(request.weight_format, request.expert_format);
  SyntheticFormats f;
  f.weights = asked.weights.value_or(WeightFormat::w4a16);
  f.experts = asked.experts;
  f.group = request.group_size.value_or(kW4a16GroupSize);
  return f;
}

std::string describe_formats(const SyntheticFormats& f) {
  std::string text = weight_tier_name(f.weights);
  if (f.experts && *f.experts != f.weights) text += std::string(", experts ") + weight_tier_name(*f.experts);
  if (f.weights == WeightFormat::w4_zp || f.weights == WeightFormat::w8_zp) text += ", group " + std::to_string(f.group);
  return text;
}

// The model a request names: --model, else the config.json beside the weights (never a preset in
// its place: weights against the wrong shapes would fail later and less clearly), else the default.
ModelConfig request_model(const LayerRequest& request, const CheckpointFiles* files) {
  if (!request.model.empty()) return resolve_model(request.model);
  if (!files) return resolve_model(kDefaultModel);
  if (!files->config) {
    throw Error(Status::not_found, request.weights + ": no model config: expected " + files->config_source +
                                       " beside the weights; pass --model PRESET|config.json to say which model they belong to");
  }
  return architecture_model_config(*files->config, files->config_source);
}

// A checkpoint's format is what it declares: formats asked for may only repeat it.
void check_asked_formats(const WeightTierRequest& asked, const LayerSource& source) {
  const FfnWeights& w = source.weights;
  const WeightFormat have = w.dense ? w.dense->format() : w.moe ? w.moe->gate_up.format : WeightFormat::w4a16;
  for (const auto& [format, by] : {std::pair{asked.weights, asked.weights_source}, std::pair{asked.experts, asked.experts_source}}) {
    if (format && *format != have) {
      throw Refusal(by + " asks for " + weight_tier_name(*format) + " weights, but " + source.weights_source + " holds " +
                    weight_tier_name(have) + " weights (" + source.quantization + "): a checkpoint's format is what it declares");
    }
  }
}

void report(const LayerRequest& request, const std::string& stage, double fraction) {
  if (request.progress) request.progress(stage, fraction);
}

LayerSource read_weights_file(const LayerRequest& request) {
  const CheckpointFiles files = open_checkpoint(request.weights);
  LayerSource s;
  s.config = request_model(request, &files);
  s.weights_source = request.weights;
  if (has_project_names(*files.tensors)) {
    s.weights = load_project_weights(*files.tensors, s.config);
    s.quantization = "metrale W4A16 (symmetric, group 128)";
    s.formats = formats_of(s.weights);
    return s;
  }
  // A checkpoint of an architecture metrale does not know is refused, even for its FFN alone.
  if (request.model.empty() && files.config) resolve_architecture(*files.config, files.config_source, ArchitectureUse::ffn_only);
  // s.config: --model's, or the checkpoint's as its architecture runs it (architecture_model_config).
  LayerSource c = checkpoint_source(load_checkpoint(files, request.layer, std::optional(s.config)));
  c.weights_source = request.weights;
  return c;
}

// The request's source; synthetic weights are made only when `make_weights`.
LayerSource read_source(const LayerRequest& request, bool make_weights) {
  WeightTierRequest asked;
  const SyntheticFormats formats = asked_formats(request, asked);
  if (!request.weights.empty()) {
    report(request, "loading " + request.weights, 0.0);
    LayerSource s = read_weights_file(request);
    report(request, "loading " + request.weights, 1.0);
    check_asked_formats(asked, s);
    return s;
  }
  LayerSource s;
  s.config = request_model(request, nullptr);
  s.formats = formats;
  s.weights_source = "synthetic (seed " + std::to_string(request.seed) + ")";
  s.quantization = describe_formats(formats);
  if (make_weights) {
    report(request, "generating synthetic weights", 0.0);
    s.weights = synthetic_ffn_weights(s.config, request.seed, formats);
    report(request, "generating synthetic weights", 1.0);
  }
  return s;
}

// The rows `backend` appended after `before`: this layer's lookups.
std::vector<AuditRow> rows_after(Backend& backend, uint64_t before) {
  std::vector<AuditRow> rows;
  for (auto& row : backend.audit().snapshot()) {
    if (row.sequence > before && row.backend == backend.name()) rows.push_back(std::move(row));
  }
  return rows;
}

FfnBuildOptions build_options(const LayerRequest& request, const LayerSource& source, ActivationRequest& activations) {
  activations = activation_request(request.activations, source.declared_activations, source.declared_source,
                                   source.declared_scaling);
  return FfnBuildOptions{MoeBuildOptions{.use_grouped_kernel = !request.per_expert}, activations};
}

}  // namespace

std::vector<std::string> OpenedLayer::tiers() const { return ffn.tiers(); }

LayerSource read_layer_source(const LayerRequest& request) { return read_source(request, true); }

LayerSource checkpoint_source(LoadedCheckpoint checkpoint) {
  LayerSource s;
  s.config = std::move(checkpoint.config);
  s.weights = std::move(checkpoint.weights);
  s.formats = formats_of(s.weights);
  s.weights_source = checkpoint.description;
  s.layer = checkpoint.layer;
  s.declared = checkpoint.quant.summary();
  s.quantization = s.declared + " (" + checkpoint.quant.source + "), layer " + std::to_string(checkpoint.layer);
  s.declared_activations = declared_activation_tier(checkpoint.quant);
  s.declared_source = checkpoint.quant.source;
  s.declared_scaling = declared_activation_scaling(checkpoint.quant);
  return s;
}

LayerSource layer_source(const ModelConfig& config, FfnWeights weights, std::string weights_source) {
  weights.validate(config);
  LayerSource s;
  s.config = config;
  s.formats = formats_of(weights);
  s.weights = std::move(weights);
  s.weights_source = std::move(weights_source);
  s.quantization = describe_formats(s.formats);
  return s;
}

OpenedLayer open_layer(Backend& backend, const LayerRequest& request) {
  return open_layer(backend, read_layer_source(request), request);
}

OpenedLayer open_layer(Backend& backend, LayerSource source, const LayerRequest& request) {
  OpenedLayer layer;
  const FfnBuildOptions options = build_options(request, source, layer.activations);
  const std::string stage = "building the layers on " + backend.name();
  report(request, stage, 0.0);
  const uint64_t before = backend.audit().last_sequence();
  layer.ffn = FfnComponent::build(backend, source.config, source.weights, options);
  layer.audit = rows_after(backend, before);
  report(request, stage, 1.0);
  enforce_lock(backend, layer.audit);
  layer.source = std::move(source);
  return layer;
}

std::vector<AuditRow> resolve_layer(Backend& backend, const LayerRequest& request) {
  const LayerSource source = read_source(request, false);
  ActivationRequest activations;
  const FfnBuildOptions options = build_options(request, source, activations);
  std::vector<AuditRow> rows = build_ffn_for_audit(backend, source.config, options, source.formats);
  enforce_lock(backend, rows);
  return rows;
}

namespace {

// A checkpoint for the blocks above the FFN: its files, the decoder config, the declaration.
struct DecoderSource {
  CheckpointFiles files;
  DecoderConfig config;
  CheckpointQuant quant;
};

DecoderSource read_decoder_source(const LayerRequest& request, const char* what) {
  if (request.weights.empty()) {
    throw Error(Status::invalid_argument, std::string(what) + " needs a checkpoint (--weights DIR): its config.json gives the "
                                                              "attention's shapes and its tensors the weights");
  }
  report(request, "loading " + request.weights, 0.0);
  DecoderSource s;
  // The config is parsed, and refused, before a tensor file is opened.
  s.files = open_checkpoint(request.weights, [&](const nlohmann::json* config, const std::string& config_source) {
    if (!config) throw Error(Status::not_found, request.weights + ": no model config: expected " + config_source + " beside the weights");
    s.config = parse_decoder_config(*config, config_source);
  });
  s.quant = checkpoint_declaration(s.files);
  return s;
}

ActivationRequest declared_activations(const LayerRequest& request, const CheckpointQuant& quant) {
  return activation_request(request.activations, declared_activation_tier(quant), quant.source, declared_activation_scaling(quant));
}

}  // namespace

Layer& OpenedBlock::block() noexcept {
  if (decoder) return *decoder;
  return *attention;
}

std::vector<std::string> OpenedBlock::tiers() const {
  std::vector<std::string> out;
  out.push_back(decoder ? decoder->mixer_tier() : attention->kernels().projections.tier);
  if (decoder) {
    for (const auto& t : decoder->ffn().tiers())
      if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

OpenedBlock open_block(Backend& backend, const LayerRequest& request) {
  const bool whole = request.block == LayerBlock::decoder;
  DecoderSource src = read_decoder_source(request, whole ? "--block decoder" : "--block attention");
  OpenedBlock out;
  out.config = src.config;
  out.layer = request.layer.value_or(0);
  out.weights_source = request.weights;
  out.quantization = src.quant.summary() + " (" + src.quant.source + "), layer " + std::to_string(out.layer);
  out.activations = declared_activations(request, src.quant);
  DecoderLayerWeights weights = read_decoder_layer(src.files, src.config, out.layer);
  if (!whole && weights.mixer != TokenMixer::full_attention) {
    throw Refusal(request.weights + ": layer " + std::to_string(out.layer) + " is a " + token_mixer_name(weights.mixer) +
                  " layer, not attention: --block attention runs full_attention layers (--block decoder runs any)");
  }
  report(request, "loading " + request.weights, 1.0);
  const std::string stage = "building the layers on " + backend.name();
  report(request, stage, 0.0);
  const uint64_t before = backend.audit().last_sequence();
  if (whole) {
    const FfnBuildOptions options{MoeBuildOptions{.use_grouped_kernel = !request.per_expert}, out.activations};
    out.decoder = DecoderLayer::build(backend, src.config, weights, options, 0);  // its own one-layer cache
  } else {
    out.attention = std::make_unique<AttentionLayer>(
        AttentionLayer::build(backend, src.config.attention, weights.attention, 0, out.activations));
  }
  out.audit = rows_after(backend, before);
  report(request, stage, 1.0);
  enforce_lock(backend, out.audit);
  return out;
}

namespace {

// A model without a checkpoint: a decoder preset or a config.json, with seeded weights in the
// format asked for (--weight-quantization; default bf16).
std::unique_ptr<ModelWeightSource> synthetic_model(const LayerRequest& request, DecoderConfig& config, OpenedModel& out) {
  if (request.model.empty()) {
    throw Error(Status::invalid_argument, "the model needs a checkpoint (--weights DIR) or a model (--model PRESET|config.json) "
                                          "to run on synthetic weights");
  }
  if (auto preset = decoder_preset(request.model)) {
    config = parse_decoder_config(*preset, request.model);
  } else {
    const std::filesystem::path path = std::filesystem::is_directory(request.model) ? std::filesystem::path(request.model) / "config.json"
                                                                                     : std::filesystem::path(request.model);
    std::string names;
    for (const auto& p : decoder_presets()) names += (names.empty() ? "" : ", ") + std::string(p.name);
    if (!std::filesystem::exists(path)) {
      throw Error(Status::not_found, "--model " + request.model + ": neither a model preset (" + names + ") nor a config.json");
    }
    config = parse_decoder_config(read_json_file(path, "model config", kMaxConfigBytes), path.string());
  }
  WeightTierRequest asked = weight_tier_request(request.weight_format, request.expert_format);
  const WeightFormat format = asked.weights.value_or(WeightFormat::bf16);
  out.weights_source = "synthetic (seed " + std::to_string(request.seed) + ")";
  out.quantization = weight_tier_name(format);
  out.activations = activation_request(request.activations);
  return synthetic_model_weights(config, request.seed, format);
}

}  // namespace

OpenedModel open_model(Backend& backend, const LayerRequest& request) {
  OpenedModel out;
  DecoderConfig config;
  std::unique_ptr<ModelWeightSource> weights;
  std::shared_ptr<const TensorSource> tensors;
  // Reading and uploading go layer by layer, as one stage.
  const std::string stage = (request.weights.empty() ? "building the model on " : "loading " + request.weights + " onto ") +
                            backend.name();
  if (request.weights.empty()) {
    weights = synthetic_model(request, config, out);
  } else {
    DecoderSource src = read_decoder_source(request, "the model");
    config = src.config;
    out.weights_source = request.weights;
    out.quantization = src.quant.summary() + " (" + src.quant.source + ")";
    out.activations = declared_activations(request, src.quant);
    tensors = src.files.tensors;
    out.load.tensor_bytes = tensors->tensor_bytes();
    weights = checkpoint_model_weights(src.files, src.config, src.quant);
  }
  const uint64_t before = backend.audit().last_sequence(), uploaded = backend.bytes_copied_to_device();
  const FfnBuildOptions options{MoeBuildOptions{.use_grouped_kernel = !request.per_expert}, out.activations};
  out.model = DecoderModel::build(backend, config, *weights, options, [&](uint32_t done, uint32_t total) {
    report(request, stage, static_cast<double>(done) / total);
  });
  report(request, stage, 1.0);
  out.load.bytes_uploaded = backend.bytes_copied_to_device() - uploaded;
  out.load.device_weight_bytes = out.model->weight_bytes();
  if (tensors) {
    out.load.bytes_read = tensors->bytes_read();
    if (out.model->embedding().mapped()) out.load.bytes_mapped = out.model->embedding().bytes();
  }
  // The engine that runs the model tries sample/argmax; looked up here too, so the model's audit
  // and a lock written from it cover it.
  try_argmax_kernel(backend);
  out.audit = rows_after(backend, before);
  enforce_lock(backend, out.audit);
  return out;
}

}  // namespace metrale::layers
