// SPDX-License-Identifier: MIT OR Apache-2.0
// DecoderLayer: one layer of a Llama/Qwen-family decoder (docs/layers.md, "The decoder"), a
// stateful Layer whose batch state is a SequenceBatch (state/sequence_batch.hpp). For hidden states h
// [m, hidden], with transformers' bf16 rounding points:
//   x  = rms_norm(h, input_layernorm)                         norm/rms_norm (zero-centred models:
//                                                             norm/rms_norm_zero_centred, never fused)
//   a  = mixer(x)                                             AttentionLayer, or DeltaNetLayer where the
//                                                             spec's layer_types say linear_attention
//   h2 = bf16(h + a); x2 = rms_norm(h2, post_attention_layernorm)
//        norm/rms_norm_residual when the backend has it, else norm/add then norm/rms_norm (same bits)
//   out = bf16(h2 + ffn(x2))                                  FfnComponent (dense or MoE), norm/add
// A layer without an FFN returns h2. Not reentrant (buffers are the layer's); the Backend must
// outlive it.
#pragma once

#include "attention/attention.hpp"
#include "decoder/decoder_weights.hpp"
#include "deltanet/deltanet.hpp"

#include "ffn/ffn.hpp"

#include <metrale/backend.hpp>

#include <memory>
#include <optional>
#include <vector>

namespace metrale::layers {

struct DecoderNormKernels {
  KernelHandle rms_norm;           // norm/rms_norm (or norm/rms_norm_zero_centred), required
  KernelHandle rms_norm_residual;  // norm/rms_norm_residual, tried (not for zero-centred norms)
  KernelHandle add;                // norm/add: the residual adds (required)
};
DecoderNormKernels resolve_decoder_norms(Backend& backend, bool zero_centred = false);

class DecoderLayer final : public Layer {
 public:
  // Builds the mixer and the FFN (`options` as FfnComponent::build takes them; the same
  // activation tier for the mixer's projections) and uploads the norm weights. The layer's state
  // lives in the pool's slots of index `cache_layer` among the layers of its mixer kind (default:
  // the layer's own number; a layer run alone, `metrale run --block decoder`, uses a one-layer
  // cache: 0).
  static std::unique_ptr<DecoderLayer> build(Backend& backend, const DecoderConfig& config, const DecoderLayerWeights& weights,
                                             const FfnBuildOptions& options = {},
                                             std::optional<uint32_t> cache_layer = std::nullopt);

  DevicePtr forward(const LayerBatch& batch, uint64_t stream = 0) override;
  // The same into caller memory (bf16 [m, hidden]; may not alias x).
  void forward_into(const SequenceBatch& kv, DevicePtr x, DevicePtr out, uint64_t stream = 0);
  std::vector<PlanStep> plan(uint32_t m) const override;

  // The mixer: exactly one of the two is non-null.
  AttentionLayer* attention() noexcept { return attention_.get(); }
  const AttentionLayer* attention() const noexcept { return attention_.get(); }
  DeltaNetLayer* deltanet() noexcept { return deltanet_.get(); }
  // The mixer's projection tier ("attn: bf16 activations", ...).
  const std::string& mixer_tier() const noexcept;
  FfnComponent& ffn() noexcept { return ffn_; }
  uint32_t layer() const noexcept { return layer_; }
  size_t weight_bytes() const noexcept;

 private:
  explicit DecoderLayer(FfnComponent ffn) : ffn_(std::move(ffn)) {}
  void mix(const SequenceBatch& state, DevicePtr x, DevicePtr out, uint64_t stream);
  Backend* backend_ = nullptr;
  uint32_t layer_ = 0, hidden_ = 0;
  float eps_ = 1e-6f;
  DecoderNormKernels norms_;
  std::unique_ptr<AttentionLayer> attention_;
  std::unique_ptr<DeltaNetLayer> deltanet_;
  FfnComponent ffn_;
  DeviceBuffer input_norm_, post_norm_;
  DeviceBuffer normed_, attn_out_, residual_, out_;
};

// norm/rms_norm over m rows of h (bf16); in place allowed.
void launch_rms_norm(Backend& backend, KernelHandle rms_norm, DevicePtr x, DevicePtr weight, DevicePtr y, uint32_t m,
                     uint32_t h, float eps, uint64_t stream);

}  // namespace metrale::layers
