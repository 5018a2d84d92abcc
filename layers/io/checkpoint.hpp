// SPDX-License-Identifier: MIT OR Apache-2.0
// Loading one decoder layer's FFN from a real checkpoint directory (docs/checkpoint-formats.md):
// config.json says the model (and, per layer, whether its FFN is dense or a MoE),
// quantization_config (or quantize_config.json beside it) says the format; each projection is
// read by its tool's layout and converted exactly into the canonical layouts of docs/kernels.md.
//
// Assembly: gate and up are fused into one [2I, H] projection (gate rows first); an act-order
// down projection's permutation is folded into the gate/up row order (so the activation output
// comes out in the order down reads, and only gate/up's input needs a gather at run time); MoE
// experts are stacked; a DeepSeek routed_scaling_factor is folded into the experts' down scales.
#pragma once

#include "io/quant_config.hpp"

#include "io/config.hpp"
#include "core/tiers.hpp"
#include "io/weights.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace metrale::layers {

struct LoadedCheckpoint {
  ModelConfig config;     // the chosen layer's FFN (routed_scaling_factor folded into the weights: 1)
  FfnWeights weights;
  CheckpointQuant quant;  // what the checkpoint declares
  uint32_t layer = 0;
  std::string description;  // the file, index or directory
};

class TensorSource;

// The directory holding a checkpoint given as a directory, a .safetensors file or an index.
std::filesystem::path checkpoint_directory(const std::filesystem::path& path);

// A checkpoint's files, each opened or read once: its tensors (every shard's header), and the
// config.json beside them when there is one. What follows reads from here, never from the paths.
struct CheckpointFiles {
  std::filesystem::path path;       // as given
  std::filesystem::path directory;  // checkpoint_directory(path)
  std::shared_ptr<const TensorSource> tensors;
  std::optional<nlohmann::json> config;  // config.json's document; nullopt: there is none
  std::string config_source;             // its path, for messages
};
// Reads config.json (a regular file, bounded), hands it to `check_config` when given (a refusal
// there comes before any tensor file is opened), then opens the tensors. Errors name the file.
using ConfigCheck = std::function<void(const nlohmann::json* config, const std::string& config_source)>;
CheckpointFiles open_checkpoint(const std::filesystem::path& path, const ConfigCheck& check_config = {});
// The quantization_config of config.json, else quantize_config.json beside it; nullopt when
// neither declares one. Errors name the file.
std::optional<CheckpointQuant> read_checkpoint_quant(const std::filesystem::path& directory);
// The same from files already read (config.json's document; the sidecar is read here).
std::optional<CheckpointQuant> read_checkpoint_quant(const CheckpointFiles& files);

// What the checkpoint declares: read_checkpoint_quant's, else unquantized in config.json's
// torch_dtype (transformers 5: dtype).
CheckpointQuant checkpoint_declaration(const CheckpointFiles& files);

// The activation tier the checkpoint declares (compressed-tensors' dynamic int8 or fp8 input
// activations, block FP8's fp8 per 128 columns); nullopt: bf16, nothing declared.
std::optional<ActivationQuant> declared_activation_tier(const CheckpointQuant& quant) noexcept;
// How that tier's scales are set as the writing tool sets them: per row or per 128 columns, in
// compressed-tensors' bf16 arithmetic or in f32 (docs/checkpoint-formats.md).
ActivationScaling declared_activation_scaling(const CheckpointQuant& quant) noexcept;

// Loads layer `layer` (default: the lowest numbered one with FFN tensors) of the checkpoint at
// `path`. `config` overrides the config.json beside the weights (the model's config, not the
// layer's: for_layer() is applied here).
LoadedCheckpoint load_checkpoint(const std::filesystem::path& path, std::optional<uint32_t> layer = std::nullopt,
                                 const std::optional<ModelConfig>& config = std::nullopt);
// The same from files already opened; without `config`, the model is files.config's; with
// `declared`, the checkpoint's declaration already parsed (a model's loader parses it once).
LoadedCheckpoint load_checkpoint(const CheckpointFiles& files, std::optional<uint32_t> layer = std::nullopt,
                                 const std::optional<ModelConfig>& config = std::nullopt,
                                 const CheckpointQuant* declared = nullptr);

}  // namespace metrale::layers
