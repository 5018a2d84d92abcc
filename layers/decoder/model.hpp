// SPDX-License-Identifier: MIT OR Apache-2.0
// DecoderModel: a whole Llama/Qwen-family decoder (docs/layers.md, "The decoder"): the embedding
// gather (embed/embedding), every DecoderLayer over one KV cache the caller owns (a SequenceBatch per
// batch), the final RMSNorm and the logits projection (lm_head, or the embedding table when tied,
// through the linear core like any projection). Built once; forward and logits are not reentrant.
#pragma once

#include "decoder/decoder_layer.hpp"

#include "linear/projection_set.hpp"

#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace metrale::layers {

class DecoderModel {
 public:
  // Uploads every weight; `progress(done, total)` after each layer.
  static std::unique_ptr<DecoderModel> build(Backend& backend, const DecoderConfig& config, const ModelWeights& weights,
                                             const FfnBuildOptions& options = {},
                                             const std::function<void(uint32_t, uint32_t)>& progress = {});

  const DecoderConfig& config() const noexcept { return config_; }
  // A KV cache shape for this model holding `tokens` tokens in blocks of `block_size`.
  StatePoolShape cache_shape(uint64_t tokens, uint32_t block_size = 16) const;

  // The hidden states after the last layer, bf16 [rows, hidden] (the model's buffer, valid until
  // the next forward), of token ids `ids` (i32 [kv.rows()] on the device) appended by `kv`.
  // An id outside the vocabulary fails the embedding launch (the CPU backend names it).
  DevicePtr forward(const SequenceBatch& kv, DevicePtr ids, uint64_t stream = 0);
  // The logits, bf16 [rows.size(), vocab] (the model's buffer), of rows `rows` of `hidden`
  // (forward's output of `hidden_rows` rows): the final norm, then the logits projection.
  DevicePtr logits(DevicePtr hidden, uint32_t hidden_rows, std::span<const uint32_t> rows, uint64_t stream = 0);

  std::span<const std::unique_ptr<DecoderLayer>> layers() const noexcept { return layers_; }
  // The launches of one forward of m rows, every layer's, then the head's for `logit_rows` rows.
  std::vector<PlanStep> plan(uint32_t m, uint32_t logit_rows) const;
  // Each projection set's tier, once ("attn: bf16 activations", ...).
  std::vector<std::string> tiers() const;
  size_t weight_bytes() const noexcept;

 private:
  DecoderModel() = default;
  Backend* backend_ = nullptr;
  DecoderConfig config_;
  KernelHandle embedding_;
  DecoderNormKernels norms_;
  DeviceBuffer embed_table_, final_norm_;
  ProjectionSet head_set_;
  DeviceQuantMatrix head_;
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  DeviceBuffer hidden_[2], selected_, logits_;
  ProjectionScratch scratch_;
};

}  // namespace metrale::layers
