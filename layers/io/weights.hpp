// SPDX-License-Identifier: MIT OR Apache-2.0
// Host-side FFN weights: synthetic (seeded), loaded from safetensors (the project's tensor names
// or a symmetric group-128 GPTQ checkpoint), and saved in the project's names. docs/layers.md
// lists the tensor names and layouts.
#pragma once

#include "io/config.hpp"
#include "core/quant_synthetic.hpp"
#include "core/w4a16.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace metrale::layers {

// One dense FFN: gate and up fused into one [2I, H] projection (gate rows first), down [H, I].
struct DenseFfnWeights {
  QuantMatrix gate_up;
  QuantMatrix down;
  // bf16 biases (Llama's mlp_bias): gate's then up's in gate_up's row order [2I], down's [H];
  // both empty when the FFN has none.
  std::vector<uint16_t> gate_up_bias;
  std::vector<uint16_t> down_bias;
  uint32_t hidden() const noexcept { return down.n; }
  uint32_t intermediate() const noexcept { return down.k; }
  bool has_bias() const noexcept { return !gate_up_bias.empty(); }
  size_t bytes() const noexcept { return gate_up.bytes() + down.bytes() + 2 * (gate_up_bias.size() + down_bias.size()); }
  WeightFormat format() const noexcept { return gate_up.format; }  // validate(): gate_up's and down's agree
  bool act_order() const noexcept { return !gate_up.perm.empty() || !down.perm.empty(); }
  // Shapes agree with each other and with (hidden, intermediate); throws Error naming the tensor.
  void validate(uint32_t hidden, uint32_t intermediate) const;
};

struct MoeWeights {
  uint32_t experts = 0;
  uint32_t hidden = 0;
  std::vector<float> router;  // f32 [E, H]
  QuantMatrix gate_up;        // stack of E matrices [2I, H]
  QuantMatrix down;           // stack of E matrices [H, I]
  std::optional<DenseFfnWeights> shared_expert;
  std::vector<float> shared_expert_gate;  // f32 [1, H]; empty: the shared expert is added ungated
  uint32_t intermediate() const noexcept { return down.k; }
  size_t bytes() const noexcept;
  size_t expert_bytes() const noexcept { return gate_up.bytes_per_matrix() + down.bytes_per_matrix(); }
  void validate(const ModelConfig& config) const;
};

struct FfnWeights {
  FfnKind kind = FfnKind::none;
  std::optional<DenseFfnWeights> dense;
  std::optional<MoeWeights> moe;
  size_t bytes() const noexcept;
  // Matches the config's kind and shapes; throws Error naming the tensor otherwise.
  void validate(const ModelConfig& config) const;
};

// The formats synthetic weights are made in (--weight-quantization, --expert-quantization).
struct SyntheticFormats {
  WeightFormat weights = WeightFormat::w4a16;  // dense FFN and shared expert
  std::optional<WeightFormat> experts;         // MoE experts; unset: `weights`
  uint32_t group = kW4a16GroupSize;            // zero-point formats: 32, 64 or 128
  bool symmetric = false;                      // zero-point formats: every zero point at the middle
  bool act_order = false;                      // every projection with a K permutation
};

// The formats `weights` are in, as SyntheticFormats says them: what resolving a layer's kernels
// needs without the weights (metrale audit --weights). Dense: the dense (or shared expert's) format.
SyntheticFormats formats_of(const FfnWeights& weights);

// Deterministic weights for `config` from `seed`; each tensor has its own stream.
FfnWeights synthetic_ffn_weights(const ModelConfig& config, uint64_t seed, const SyntheticFormats& formats = {});

struct WeightLoadOptions {
  // GPTQ checkpoints hold many layers: the decoder layer whose FFN to load; nullopt: the lowest
  // numbered layer that has one.
  std::optional<uint32_t> layer;
};

// Loads from a .safetensors file, a *.safetensors.index.json (sharded checkpoint), or a directory
// holding either: the project's names (docs/layers.md), or a real checkpoint's (Hugging Face
// names, the format its quantization_config declares: layers/io/checkpoint.hpp), for
// `config`'s model (a MoE model's dense layers are read as dense).
FfnWeights load_ffn_weights(const std::filesystem::path& path, const ModelConfig& config,
                            const WeightLoadOptions& options = {});

class TensorSource;
// The project's own tensor names (written by save_ffn_weights).
bool has_project_names(const TensorSource& src);
FfnWeights load_project_weights(const TensorSource& src, const ModelConfig& config);

// Writes `weights` in the project's tensor names (metadata: format metrale-w4a16, the config).
void save_ffn_weights(const FfnWeights& weights, const ModelConfig& config, const std::filesystem::path& path);

}  // namespace metrale::layers
