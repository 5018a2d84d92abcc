// SPDX-License-Identifier: MIT OR Apache-2.0
#include "decoder/decoder_weights.hpp"

#include "core/quant_synthetic.hpp"
#include "core/rng.hpp"
#include "io/config_json.hpp"
#include "io/linear_reader.hpp"
#include "io/tensor_source.hpp"

#include <metrale/status.hpp>

#include <algorithm>

namespace metrale::layers {

namespace {

using config_json::Object;

uint32_t positive(const Object& root, const char* key) {
  const auto v = root.u32(key);
  if (!v || *v == 0) root.malformed(key, "a positive integer", root.find(key));
  return *v;
}

// "<root>" of "<root>layers.": "model." for every family here.
std::string root_of(const std::string& layers) { return layers.substr(0, layers.size() - std::string("layers.").size()); }

// The logits projection: lm_head as the declaration says. Only compressed-tensors quantizes it
// (when its ignore list leaves it in); GPTQ, AWQ and FP8 tools keep it in float.
QuantMatrix read_lm_head(const TensorSource& src, const CheckpointQuant& quant, uint32_t vocab, uint32_t hidden) {
  if (quant.method == QuantMethod::compressed_tensors) return read_linear(src, "lm_head", vocab, hidden, quant);
  return read_float16_linear(src, "lm_head", vocab, hidden, quant);
}

}  // namespace

DecoderConfig parse_decoder_config(const nlohmann::json& doc, const std::string& source) {
  const Object root(doc, source, "", "a JSON object (the model config)");
  DecoderConfig c;
  c.source = source;
  c.architecture = resolve_architecture(doc, source);
  c.ffn = parse_model_config(doc, source);
  c.ffn.mlp_bias = c.architecture.mlp_bias;  // the spec decides (a key it does not honour is refused)
  c.attention = parse_attention_config(doc, source);
  c.vocab_size = positive(root, "vocab_size");
  c.num_layers = positive(root, "num_hidden_layers");
  // Each layer's FFN must be one the spec has: a dense architecture given MoE keys (which its
  // transformers class ignores) would otherwise run experts nobody trained it with.
  const auto& ffns = c.architecture.spec->ffns;
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const FfnKind kind = c.ffn.for_layer(l).ffn_kind();
    if (std::find(ffns.begin(), ffns.end(), kind) == ffns.end()) {
      throw Refusal(source + ": layer " + std::to_string(l) + " would have a " + ffn_kind_name(kind) + " FFN (" +
                    (kind == FfnKind::moe ? "num_experts" : "intermediate_size") + "), which " +
                    std::string(c.architecture.spec->model_type) + " does not have");
    }
  }
  c.tie_word_embeddings = root.boolean("tie_word_embeddings").value_or(false);
  c.rms_norm_eps = c.attention.rms_norm_eps;
  return c;
}

std::string layers_prefix(const TensorSource& src) {
  for (const std::string& name : src.names()) {
    const size_t at = name.find("layers.0.self_attn.");
    if (at != std::string::npos && (at == 0 || name[at - 1] == '.')) return name.substr(0, at) + "layers.";
  }
  throw Error(Status::not_found, src.description() + ": no decoder layer's attention (no tensor named "
                                                     "<root>layers.0.self_attn.*, as transformers names them)");
}

namespace {

// Layer `layer` under `layers` ("model.layers."), found once per checkpoint.
DecoderLayerWeights read_layer(const CheckpointFiles& files, const DecoderConfig& config, uint32_t layer,
                               const std::string& layers) {
  if (layer >= config.num_layers) {
    throw Error(Status::invalid_argument, "layer " + std::to_string(layer) + ": " + config.source + " has num_hidden_layers = " +
                                              std::to_string(config.num_layers));
  }
  const TensorSource& src = *files.tensors;
  const std::string prefix = layers + std::to_string(layer) + ".";
  const uint64_t hidden = config.attention.hidden_size;
  DecoderLayerWeights w;
  w.layer = layer;
  LoadedCheckpoint ffn = load_checkpoint(files, layer, config.ffn);
  w.ffn_config = ffn.config;
  w.ffn = std::move(ffn.weights);
  w.attention = read_attention_weights(src, prefix + "self_attn.", config.attention, ffn.quant);
  w.input_norm = read_bf16_tensor(src, prefix + "input_layernorm.weight", {hidden});
  w.post_norm = read_bf16_tensor(src, prefix + "post_attention_layernorm.weight", {hidden});
  return w;
}

}  // namespace

DecoderLayerWeights read_decoder_layer(const CheckpointFiles& files, const DecoderConfig& config, uint32_t layer) {
  check_tensor_names(config.architecture, *files.tensors);
  return read_layer(files, config, layer, layers_prefix(*files.tensors));
}

ModelWeights read_model_weights(const CheckpointFiles& files, const DecoderConfig& config,
                                const std::function<void(uint32_t, uint32_t)>& progress) {
  const TensorSource& src = *files.tensors;
  check_tensor_names(config.architecture, src);
  const std::string layers = layers_prefix(src), root = root_of(layers);
  const uint64_t hidden = config.attention.hidden_size, vocab = config.vocab_size;
  ModelWeights w;
  w.quant = checkpoint_declaration(files);
  w.embed = read_bf16_tensor(src, root + "embed_tokens.weight", {vocab, hidden});
  w.final_norm = read_bf16_tensor(src, root + "norm.weight", {hidden});
  if (config.tie_word_embeddings && src.contains("lm_head.weight") &&
      read_bf16_tensor(src, "lm_head.weight", {vocab, hidden}) != w.embed) {
    // transformers would use the embedding and drop lm_head: which one the model was trained with is unknowable.
    throw Refusal(src.description() + ": tensor 'lm_head.weight' differs from '" + root + "embed_tokens.weight', but " + config.source +
                  " ties them (tie_word_embeddings = true): one logits projection or the other would be silently dropped");
  }
  if (!config.tie_word_embeddings) {
    if (!src.contains("lm_head.weight") && !src.contains("lm_head.qweight") && !src.contains("lm_head.weight_packed")) {
      throw Error(Status::not_found, src.description() + ": tensor 'lm_head.weight': missing, and " + config.source +
                                         " does not set tie_word_embeddings (the logits projection would be the embedding)");
    }
    w.lm_head = read_lm_head(src, w.quant, config.vocab_size, config.attention.hidden_size);
  }
  for (uint32_t l = 0; l < config.num_layers; ++l) {
    w.layers.push_back(read_layer(files, config, l, layers));
    if (progress) progress(l + 1, config.num_layers);
  }
  return w;
}

namespace {

nlohmann::json qwen3_shape(uint32_t hidden, uint32_t layers, uint32_t heads, uint32_t kv_heads, uint32_t intermediate,
                           uint32_t vocab, bool tie) {
  return {{"model_type", "qwen3"}, {"architectures", {"Qwen3ForCausalLM"}}, {"hidden_size", hidden},
          {"num_hidden_layers", layers}, {"num_attention_heads", heads}, {"num_key_value_heads", kv_heads},
          {"head_dim", 128}, {"intermediate_size", intermediate}, {"hidden_act", "silu"}, {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000.0}, {"max_position_embeddings", 40960}, {"vocab_size", vocab},
          {"tie_word_embeddings", tie}, {"torch_dtype", "bfloat16"}};
}

}  // namespace

const std::vector<DecoderPreset>& decoder_presets() {
  static const std::vector<DecoderPreset> list{
      {"tiny-qwen3", "Qwen3 layout at toy size: 2 layers, hidden 256, 4 q / 2 kv heads of 128, vocab 1024 (tests, samples)"},
      {"qwen3-0.6b", "Qwen3-0.6B's shapes: 28 layers, hidden 1024, 16 q / 8 kv heads of 128, intermediate 3072, vocab 151936, tied"},
      {"qwen3-1.7b", "Qwen3-1.7B's shapes: 28 layers, hidden 2048, 16 q / 8 kv heads of 128, intermediate 6144, vocab 151936, tied"},
  };
  return list;
}

std::optional<nlohmann::json> decoder_preset(std::string_view name) {
  if (name == "tiny-qwen3") return qwen3_shape(256, 2, 4, 2, 512, 1024, false);
  if (name == "qwen3-0.6b") return qwen3_shape(1024, 28, 16, 8, 3072, 151936, true);
  if (name == "qwen3-1.7b") return qwen3_shape(2048, 28, 16, 8, 6144, 151936, true);
  return std::nullopt;
}

ModelWeights synthetic_model_weights(const DecoderConfig& c, uint64_t seed, WeightFormat format) {
  const uint32_t hidden = c.attention.hidden_size;
  ModelWeights w;
  w.embed = synthetic_bf16_values(seed, "embed_tokens", size_t{c.vocab_size} * hidden, 0.0, 1.7);  // unit spread
  w.final_norm = synthetic_bf16_values(seed, "norm", hidden, 1.0, 0.2);
  if (!c.tie_word_embeddings) w.lm_head = synthetic_quant("lm_head", WeightFormat::bf16, c.vocab_size, hidden, seed);
  SyntheticFormats formats;
  formats.weights = format;
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const uint64_t layer_seed = derive_seed(seed, "layer " + std::to_string(l));
    DecoderLayerWeights d;
    d.layer = l;
    d.ffn_config = c.ffn.for_layer(l);
    d.ffn = synthetic_ffn_weights(d.ffn_config, layer_seed, formats);
    d.attention = synthetic_attention_weights(c.attention, layer_seed, format);
    d.input_norm = synthetic_bf16_values(layer_seed, "input_layernorm", hidden, 1.0, 0.2);
    d.post_norm = synthetic_bf16_values(layer_seed, "post_attention_layernorm", hidden, 1.0, 0.2);
    w.layers.push_back(std::move(d));
  }
  return w;
}

}  // namespace metrale::layers
