// SPDX-License-Identifier: MIT OR Apache-2.0
// A whole decoder model from a Hugging Face checkpoint (docs/layers.md, "The decoder"): its config
// (the FFN's of io/config.hpp, the attention's of attention/attention_config.hpp, and the model's
// own keys) and its weights as transformers names them for the Llama, Mistral/Mixtral, Qwen2(-MoE)
// and Qwen3(-MoE) families: <root>embed_tokens.weight, <root>layers.L.{input_layernorm,
// post_attention_layernorm}.weight, <root>layers.L.self_attn.*, the FFN (io/checkpoint.hpp),
// <root>norm.weight, and lm_head.weight unless tie_word_embeddings. Where <root> is ("model.",
// ...) is found from the tensor names, never from model_type.
#pragma once

#include "architectures/architecture.hpp"
#include "attention/attention_config.hpp"
#include "attention/attention_weights.hpp"
#include "decoder/embedding_table.hpp"
#include "deltanet/deltanet_weights.hpp"

#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "io/weights.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

struct DecoderConfig {
  ResolvedArchitecture architecture;  // the spec, each layer's mixer, the config's biases
  ModelConfig ffn;            // the model's FFN keys (ModelConfig::for_layer gives each layer's)
  AttentionConfig attention;
  DeltaNetConfig deltanet;    // the linear_attention layers' (hybrid architectures only)
  uint32_t vocab_size = 0;
  uint32_t num_layers = 0;    // num_hidden_layers
  bool tie_word_embeddings = false;  // the logits projection is the embedding table (absent: false, as these families' configs)
  float rms_norm_eps = 1e-6f;
  std::string source;
};

// A wrapper's language model is read from its text_config (language_model_config()).
// The architecture's refusals first (architectures/architecture.hpp; one warning per unknown key),
// then Error(invalid_argument) naming the key for a missing or malformed vocab_size /
// num_hidden_layers, and whatever the FFN and attention parsers refuse.
DecoderConfig parse_decoder_config(const nlohmann::json& doc, const std::string& source);

// One decoder layer's weights.
struct DecoderLayerWeights {
  uint32_t layer = 0;
  TokenMixer mixer = TokenMixer::full_attention;
  ModelConfig ffn_config;          // this layer's FFN (for_layer applied)
  std::vector<uint16_t> input_norm, post_norm;  // bf16 [hidden]
  AttentionWeights attention;      // a full_attention layer's
  DeltaNetWeights deltanet;        // a linear_attention layer's
  FfnWeights ffn;
};

// Where a checkpoint keeps its layers: "<root>layers." ("model.layers."), from the tensor names
// (the tensors an architecture does not run, an MTP head's, are not looked at). Error(not_found)
// naming the checkpoint when no tensor looks like a decoder layer's.
std::string layers_prefix(const TensorSource& src, const ResolvedArchitecture& architecture);

// Layer `layer` of an opened checkpoint (its declared quantization applies to every projection).
// Every tensor name of the checkpoint is checked against the spec's table first.
DecoderLayerWeights read_decoder_layer(const CheckpointFiles& files, const DecoderConfig& config, uint32_t layer);

// Where a model's weights come from, one part at a time, so a load never holds the whole model
// on the host: DecoderModel::build takes the head first, then the table and each layer, uploads
// each part and drops it. Each part is asked for once.
class ModelWeightSource {
 public:
  virtual ~ModelWeightSource() = default;
  // The logits projection [vocab, hidden]: lm_head, or the embedding table as bf16 when tied.
  virtual QuantMatrix head() = 0;
  virtual EmbeddingTable embedding() = 0;
  virtual std::vector<uint16_t> final_norm() = 0;  // bf16 [hidden]
  virtual DecoderLayerWeights layer(uint32_t layer) = 0;
};

// Whole-model presets for synthetic weights (`metrale generate --model NAME`, the benches): their
// config.json documents, shaped as the models they are named after.
struct DecoderPreset {
  std::string_view name;
  std::string_view description;
};
const std::vector<DecoderPreset>& decoder_presets();
// The preset's config document; nullopt for another name.
std::optional<nlohmann::json> decoder_preset(std::string_view name);

// Seeded weights of `format` for every layer (attention and FFN), the embedding (unit spread),
// the norms (near 1) and the logits projection (untied: bf16), each made when asked for.
std::unique_ptr<ModelWeightSource> synthetic_model_weights(const DecoderConfig& config, uint64_t seed, WeightFormat format);

// The checkpoint's weights: every tensor name checked against the spec's table, the tied
// lm_head's agreement with the embedding, and an untied one's presence, before any part is given;
// each tensor read once (the embedding mapped in place, and read once more only as a tied head),
// `quant` the checkpoint's declaration (checkpoint_declaration(files), parsed once by the caller).
// `progress(done, total)` after each layer.
std::unique_ptr<ModelWeightSource> checkpoint_model_weights(const CheckpointFiles& files, const DecoderConfig& config,
                                                            const CheckpointQuant& quant,
                                                            std::function<void(uint32_t, uint32_t)> progress = {});

}  // namespace metrale::layers
