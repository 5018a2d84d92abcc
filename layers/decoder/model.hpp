// SPDX-License-Identifier: MIT OR Apache-2.0
// DecoderModel: a whole Llama/Qwen-family decoder (docs/layers.md, "The decoder"): the embedding
// rows gathered on the host from the table read in place (decoder/embedding_table.hpp) and
// uploaded, every DecoderLayer over the state the caller owns (a SequenceBatch per batch), the
// final RMSNorm and the logits projection (lm_head, or the embedding table when tied, through the
// linear core like any projection). Built once; forward and logits are not reentrant.
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
  // Takes each part of `weights` once - layer 0, the head, the embedding table, the final norm,
  // the other layers - uploads it and drops the host copy before the next; `progress(done,
  // total)` after each layer.
  static std::unique_ptr<DecoderModel> build(Backend& backend, const DecoderConfig& config, ModelWeightSource& weights,
                                             const FfnBuildOptions& options = {},
                                             const std::function<void(uint32_t, uint32_t)>& progress = {});

  const DecoderConfig& config() const noexcept { return config_; }
  // A state pool shape for this model: KV blocks of `block_size` holding `tokens` tokens for its
  // attention layers, and a recurrent slot for each of `sequences` live sequences in each of its
  // DeltaNet layers (none without them).
  StatePoolShape cache_shape(uint64_t tokens, uint32_t block_size = 16, uint32_t sequences = 16) const;

  // The hidden states after the last layer, bf16 [rows, hidden] (the model's buffer, valid until
  // the next forward), of token ids `ids` (one per row of `kv`, on the host) appended by `kv`.
  // Error(invalid_argument) naming an id outside the vocabulary and its row, before any launch.
  DevicePtr forward(const SequenceBatch& kv, std::span<const int32_t> ids, uint64_t stream = 0);
  // The logits, bf16 [rows.size(), vocab] (the model's buffer), of rows `rows` of `hidden`
  // (forward's output of `hidden_rows` rows): the final norm, then the logits projection.
  DevicePtr logits(DevicePtr hidden, uint32_t hidden_rows, std::span<const uint32_t> rows, uint64_t stream = 0);

  std::span<const std::unique_ptr<DecoderLayer>> layers() const noexcept { return layers_; }
  // The launches of one forward of m rows, every layer's, then the head's for `logit_rows` rows.
  std::vector<PlanStep> plan(uint32_t m, uint32_t logit_rows) const;
  // Each projection set's tier, once ("attn: bf16 activations", ...).
  std::vector<std::string> tiers() const;
  // Bytes of weights on the device (the embedding table is not: it stays on the host).
  size_t weight_bytes() const noexcept;
  const EmbeddingTable& embedding() const noexcept { return embedding_; }

 private:
  DecoderModel() = default;
  void upload_head(const QuantMatrix& head, const FfnBuildOptions& options);
  Backend* backend_ = nullptr;
  DecoderConfig config_;
  EmbeddingTable embedding_;
  std::vector<uint16_t> gathered_;  // the batch's embedding rows, bf16 [rows, hidden]
  DecoderNormKernels norms_;
  DeviceBuffer final_norm_;
  ProjectionSet head_set_;
  DeviceQuantMatrix head_;
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  DeviceBuffer hidden_[2], selected_, logits_;
  ProjectionScratch scratch_;
};

}  // namespace metrale::layers
