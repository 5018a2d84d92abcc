// SPDX-License-Identifier: MIT OR Apache-2.0
// The one composition of a layer (docs/layers.md, "Opening a layer"). A LayerRequest
// (layer_request.hpp) names a model, its weights (a checkpoint, a file in the project's tensor
// names, or synthetic) and the tiers asked for; open_layer reads each file once, resolves the
// config, the weights' formats and the activation tier, builds the block on a backend, returns
// the audit rows of its own lookups and enforces METRALE_LOCK on them (a Refusal naming each
// difference). resolve_layer makes the same lookups without memory or launches (`metrale audit`).
// The CLI's `run` and `audit` and EmbeddedFfn come through here; nothing else composes a layer.
// Not installed: its types hold the layers' internals (ModelConfig, FfnWeights, FfnComponent);
// programs open a layer through EmbeddedFfn (embed.hpp).
//
// Thread-safety: as the Backend's lookups; a concurrent build on the same backend would see its
// rows interleave with this one's, so build one layer per backend at a time.
#pragma once

#include "layer_request.hpp"

#include "core/tier_request.hpp"
#include "engine/generate.hpp"
#include "decoder/model.hpp"
#include "ffn/ffn.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "io/weights.hpp"

#include <metrale/audit.hpp>
#include <metrale/backend.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace metrale::layers {

// What a request's files hold (or a program's own weights): the layer's config and host weights.
struct LayerSource {
  ModelConfig config;           // the layer's (ModelConfig::for_layer applied)
  FfnWeights weights;           // empty when only formats were needed (resolve_layer, synthetic)
  SyntheticFormats formats;     // the weights' formats
  std::string weights_source;   // the path, or "synthetic (seed N)"
  std::string quantization;     // the checkpoint's declaration, where and the layer; or the synthetic formats
  std::optional<uint32_t> layer;  // a checkpoint's decoder layer
  std::string declared;         // what a checkpoint declares (CheckpointQuant::summary()); empty: none
  std::optional<ActivationQuant> declared_activations;  // what the checkpoint declares
  std::string declared_source;  // where (its config.json)
  ActivationScaling declared_scaling;  // how the tool that wrote it quantizes activations
};

// The request's config and weights, each file read once.
LayerSource read_layer_source(const LayerRequest& request);

// A loaded checkpoint's layer as a source (its declared activation tier the default).
LayerSource checkpoint_source(LoadedCheckpoint checkpoint);
// A program's own config and weights as a source (no files).
LayerSource layer_source(const ModelConfig& config, FfnWeights weights, std::string weights_source = "the program's weights");

struct OpenedLayer {
  LayerSource source;
  ActivationRequest activations;  // the tier asked for, and by what
  FfnComponent ffn;               // the block, built
  std::vector<AuditRow> audit;    // the rows of this layer's lookups, in order
  // Each projection set's tier ("w4a8: int8 activations (...)"), once, in audit order.
  std::vector<std::string> tiers() const;
};

// Builds the request's layer on `backend`. Throws what reading, resolving or building throws; a
// Refusal for an explicit request the backend cannot honour or a difference from METRALE_LOCK.
OpenedLayer open_layer(Backend& backend, const LayerRequest& request);
// The same from a source already in memory (request: tiers and options; its files are not read).
OpenedLayer open_layer(Backend& backend, LayerSource source, const LayerRequest& request);
// The lookups open_layer would make, without memory or launches; METRALE_LOCK enforced the same.
std::vector<AuditRow> resolve_layer(Backend& backend, const LayerRequest& request);

// A decoder layer's attention or the whole layer (request.block), from the checkpoint in
// request.weights (its config.json: the model). Error(invalid_argument) without weights.
struct OpenedBlock {
  DecoderConfig config;
  uint32_t layer = 0;
  std::string weights_source;
  std::string quantization;  // the checkpoint's declaration
  ActivationRequest activations;
  std::unique_ptr<DecoderLayer> decoder;       // LayerBlock::decoder
  std::unique_ptr<AttentionLayer> attention;   // LayerBlock::attention
  std::vector<AuditRow> audit;
  Layer& block() noexcept;
  std::vector<std::string> tiers() const;
};
OpenedBlock open_block(Backend& backend, const LayerRequest& request);

// The whole model of the checkpoint in request.weights, or without weights of request.model (a
// decoder preset, decoder/decoder_weights.hpp, or a config.json) on synthetic weights from
// request.seed in request.weight_format (default bf16). request.layer is ignored.
// What loading a model moved: a checkpoint's tensors are read once (bytes_read, the files'
// headers included) or used in place from the file's mapping (bytes_mapped, the embedding table);
// bytes_uploaded is what went to the device, device_weight_bytes what stays there.
struct LoadReport {
  uint64_t tensor_bytes = 0;  // the checkpoint's tensors; 0 for synthetic weights
  uint64_t bytes_read = 0, bytes_mapped = 0, bytes_uploaded = 0, device_weight_bytes = 0;
};

struct OpenedModel {
  std::string weights_source;
  std::string quantization;
  ActivationRequest activations;
  std::unique_ptr<DecoderModel> model;
  std::vector<AuditRow> audit;
  LoadReport load;
};
OpenedModel open_model(Backend& backend, const LayerRequest& request);

}  // namespace metrale::layers
