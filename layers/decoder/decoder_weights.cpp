// SPDX-License-Identifier: MIT OR Apache-2.0
#include "decoder/decoder_weights.hpp"

#include "core/quant_synthetic.hpp"
#include "core/rng.hpp"
#include "io/config_json.hpp"
#include "io/linear_reader.hpp"
#include "io/tensor_source.hpp"

#include <metrale/log.hpp>
#include <metrale/status.hpp>

#include <algorithm>
#include <cstring>

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

DecoderConfig parse_decoder_config(const nlohmann::json& wrapped, const std::string& source) {
  DecoderConfig c;
  c.source = source;
  c.architecture = resolve_architecture(wrapped, source);  // a wrapper's keys, then its language model's
  const nlohmann::json doc = language_model_config(wrapped, source);
  const Object root(doc, source, "", "a JSON object (the model config)");
  c.ffn = architecture_model_config(wrapped, source);  // with what the spec fixes (Qwen3.5-MoE's top-k norm)
  c.ffn.mlp_bias = c.architecture.mlp_bias;  // the spec decides (a key it does not honour is refused)
  c.attention = parse_attention_config(doc, source);
  if (c.architecture.spec->deltanet != DeltaNetProjections::none)
    c.deltanet = parse_deltanet_config(doc, source, c.architecture.spec->deltanet);
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

std::string layers_prefix(const TensorSource& src, const ResolvedArchitecture& architecture) {
  for (const std::string& name : src.names()) {
    if (unused_tensor(architecture, name)) continue;
    const size_t at = name.find("layers.0.input_layernorm.weight");
    if (at != std::string::npos && (at == 0 || name[at - 1] == '.')) return name.substr(0, at) + "layers.";
  }
  throw Error(Status::not_found, src.description() + ": no decoder layer (no tensor named "
                                                     "<root>layers.0.input_layernorm.weight, as transformers names them)");
}

namespace {

// Layer `layer` under `layers` ("model.layers."), found once per checkpoint.
DecoderLayerWeights read_layer(const CheckpointFiles& files, const DecoderConfig& config, uint32_t layer,
                               const std::string& layers, const CheckpointQuant& quant) {
  if (layer >= config.num_layers) {
    throw Error(Status::invalid_argument, "layer " + std::to_string(layer) + ": " + config.source + " has num_hidden_layers = " +
                                              std::to_string(config.num_layers));
  }
  const TensorSource& src = *files.tensors;
  const std::string prefix = layers + std::to_string(layer) + ".";
  const uint64_t hidden = config.attention.hidden_size;
  DecoderLayerWeights w;
  w.layer = layer;
  LoadedCheckpoint ffn = load_checkpoint(files, layer, config.ffn, &quant);
  w.ffn_config = ffn.config;
  w.ffn = std::move(ffn.weights);
  w.mixer = config.architecture.layer_mixers.at(layer);
  if (w.mixer == TokenMixer::linear_attention) w.deltanet = read_deltanet_weights(src, prefix + "linear_attn.", config.deltanet, ffn.quant);
  else w.attention = read_attention_weights(src, prefix + "self_attn.", config.attention, ffn.quant);
  w.input_norm = read_bf16_tensor(src, prefix + "input_layernorm.weight", {hidden});
  w.post_norm = read_bf16_tensor(src, prefix + "post_attention_layernorm.weight", {hidden});
  return w;
}

}  // namespace

DecoderLayerWeights read_decoder_layer(const CheckpointFiles& files, const DecoderConfig& config, uint32_t layer) {
  check_tensor_names(config.architecture, *files.tensors);
  return read_layer(files, config, layer, layers_prefix(*files.tensors, config.architecture), checkpoint_declaration(files));
}

namespace {

// The logits projection from an embedding table's bf16 values (tie_word_embeddings): bf16-nk
// holds the row-major values as they are.
QuantMatrix tied_head(const std::vector<uint16_t>& embed, uint32_t vocab, uint32_t hidden) {
  QuantMatrix m = quant_zeros("lm_head (tied: embed_tokens)", WeightFormat::bf16, vocab, hidden);
  std::memcpy(m.qweight.data(), embed.data(), embed.size() * sizeof(uint16_t));
  return m;
}

class CheckpointWeights final : public ModelWeightSource {
 public:
  CheckpointWeights(const CheckpointFiles& files, const DecoderConfig& config, const CheckpointQuant& quant,
                    std::function<void(uint32_t, uint32_t)> progress)
      : files_(files), config_(config), progress_(std::move(progress)), quant_(quant) {
    const TensorSource& src = *files.tensors;
    unused_ = check_tensor_names(config.architecture, src);
    for (const UnusedTensors& u : unused_) {
      logger()->info("{}: {} tensor(s) under '{}' are not run ({}): skipped", src.description(), u.count, u.prefix,
                     u.prefix.starts_with("mtp") ? "a multi-token-prediction head" : "a vision tower");
    }
    layers_ = layers_prefix(src, config.architecture);
    root_ = root_of(layers_);
    if (!config.tie_word_embeddings && !src.contains("lm_head.weight") && !src.contains("lm_head.qweight") &&
        !src.contains("lm_head.weight_packed")) {
      throw Error(Status::not_found, src.description() + ": tensor 'lm_head.weight': missing, and " + config.source +
                                         " does not set tie_word_embeddings (the logits projection would be the embedding)");
    }
  }

  QuantMatrix head() override {
    const TensorSource& src = *files_.tensors;
    const uint32_t vocab = config_.vocab_size, hidden = config_.attention.hidden_size;
    if (!config_.tie_word_embeddings) return read_lm_head(src, quant_, vocab, hidden);
    const std::vector<uint16_t> embed = read_bf16_tensor(src, embed_name(), {vocab, hidden});
    if (src.contains("lm_head.weight") && read_bf16_tensor(src, "lm_head.weight", {vocab, hidden}) != embed) {
      // transformers would use the embedding and drop lm_head: which one the model was trained with is unknowable.
      throw Refusal(src.description() + ": tensor 'lm_head.weight' differs from '" + embed_name() + "', but " +
                    config_.source + " ties them (tie_word_embeddings = true): one logits projection or the other " +
                    "would be silently dropped");
    }
    return tied_head(embed, vocab, hidden);
  }

  EmbeddingTable embedding() override {
    return EmbeddingTable(files_.tensors, embed_name(), config_.vocab_size, config_.attention.hidden_size);
  }

  std::vector<uint16_t> final_norm() override {
    return read_bf16_tensor(*files_.tensors, root_ + "norm.weight", {config_.attention.hidden_size});
  }

  DecoderLayerWeights layer(uint32_t l) override {
    DecoderLayerWeights w = read_layer(files_, config_, l, layers_, quant_);
    if (progress_) progress_(l + 1, config_.num_layers);
    return w;
  }

 private:
  std::string embed_name() const { return root_ + "embed_tokens.weight"; }

  CheckpointFiles files_;
  DecoderConfig config_;
  std::function<void(uint32_t, uint32_t)> progress_;
  CheckpointQuant quant_;
  std::string layers_, root_;
  std::vector<UnusedTensors> unused_;
};

class SyntheticWeights final : public ModelWeightSource {
 public:
  SyntheticWeights(const DecoderConfig& config, uint64_t seed, WeightFormat format)
      : config_(config), seed_(seed), format_(format) {}

  QuantMatrix head() override {
    const uint32_t vocab = config_.vocab_size, hidden = config_.attention.hidden_size;
    if (!config_.tie_word_embeddings) return synthetic_quant("lm_head", WeightFormat::bf16, vocab, hidden, seed_);
    return tied_head(embed_values(), vocab, hidden);
  }

  EmbeddingTable embedding() override { return EmbeddingTable(embed_values(), config_.vocab_size, config_.attention.hidden_size); }

  std::vector<uint16_t> final_norm() override {
    return synthetic_bf16_values(seed_, "norm", config_.attention.hidden_size, 1.0, 0.2);
  }

  DecoderLayerWeights layer(uint32_t l) override {
    const uint32_t hidden = config_.attention.hidden_size;
    const uint64_t layer_seed = derive_seed(seed_, "layer " + std::to_string(l));
    SyntheticFormats formats;
    formats.weights = format_;
    DecoderLayerWeights d;
    d.layer = l;
    d.ffn_config = config_.ffn.for_layer(l);
    d.ffn = synthetic_ffn_weights(d.ffn_config, layer_seed, formats);
    d.mixer = config_.architecture.layer_mixers.at(l);
    if (d.mixer == TokenMixer::linear_attention) d.deltanet = synthetic_deltanet_weights(config_.deltanet, layer_seed, format_);
    else d.attention = synthetic_attention_weights(config_.attention, layer_seed, format_);
    const double center = config_.architecture.spec->zero_centred_norms ? 0.0 : 1.0;  // zero-centred: offsets from 1
    d.input_norm = synthetic_bf16_values(layer_seed, "input_layernorm", hidden, center, 0.2);
    d.post_norm = synthetic_bf16_values(layer_seed, "post_attention_layernorm", hidden, center, 0.2);
    return d;
  }

 private:
  std::vector<uint16_t> embed_values() const {
    return synthetic_bf16_values(seed_, "embed_tokens", size_t{config_.vocab_size} * config_.attention.hidden_size, 0.0, 1.7);
  }

  DecoderConfig config_;
  uint64_t seed_;
  WeightFormat format_;
};

}  // namespace

std::unique_ptr<ModelWeightSource> checkpoint_model_weights(const CheckpointFiles& files, const DecoderConfig& config,
                                                            const CheckpointQuant& quant,
                                                            std::function<void(uint32_t, uint32_t)> progress) {
  return std::make_unique<CheckpointWeights>(files, config, quant, std::move(progress));
}

std::unique_ptr<ModelWeightSource> synthetic_model_weights(const DecoderConfig& config, uint64_t seed, WeightFormat format) {
  return std::make_unique<SyntheticWeights>(config, seed, format);
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

// Qwen3.5's text model at toy size: DeltaNet and gated attention (heads of 256) alternating.
nlohmann::json qwen3_5_shape() {
  return {{"model_type", "qwen3_5_text"}, {"architectures", {"Qwen3_5ForCausalLM"}}, {"hidden_size", 256},
          {"num_hidden_layers", 4}, {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"head_dim", 256},
          {"intermediate_size", 512}, {"hidden_act", "silu"}, {"rms_norm_eps", 1e-6}, {"vocab_size", 1024},
          {"layer_types", {"linear_attention", "full_attention", "linear_attention", "full_attention"}},
          {"linear_num_key_heads", 2}, {"linear_num_value_heads", 4}, {"linear_key_head_dim", 64},
          {"linear_value_head_dim", 64}, {"linear_conv_kernel_dim", 4}, {"max_position_embeddings", 4096},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}}},
          {"tie_word_embeddings", false}, {"torch_dtype", "bfloat16"}};
}

}  // namespace

const std::vector<DecoderPreset>& decoder_presets() {
  static const std::vector<DecoderPreset> list{
      {"tiny-qwen3", "Qwen3 layout at toy size: 2 layers, hidden 256, 4 q / 2 kv heads of 128, vocab 1024 (tests, samples)"},
      {"qwen3-0.6b", "Qwen3-0.6B's shapes: 28 layers, hidden 1024, 16 q / 8 kv heads of 128, intermediate 3072, vocab 151936, tied"},
      {"qwen3-1.7b", "Qwen3-1.7B's shapes: 28 layers, hidden 2048, 16 q / 8 kv heads of 128, intermediate 6144, vocab 151936, tied"},
      {"tiny-qwen3.5", "Qwen3.5 (text) layout at toy size: 4 layers, Gated DeltaNet (2 key / 4 value heads of 64) and gated "
                       "attention (2 q / 1 kv heads of 256) alternating, hidden 256, vocab 1024 (tests, samples)"},
  };
  return list;
}

std::optional<nlohmann::json> decoder_preset(std::string_view name) {
  if (name == "tiny-qwen3") return qwen3_shape(256, 2, 4, 2, 512, 1024, false);
  if (name == "qwen3-0.6b") return qwen3_shape(1024, 28, 16, 8, 3072, 151936, true);
  if (name == "qwen3-1.7b") return qwen3_shape(2048, 28, 16, 8, 6144, 151936, true);
  if (name == "tiny-qwen3.5") return qwen3_5_shape();
  return std::nullopt;
}

}  // namespace metrale::layers
