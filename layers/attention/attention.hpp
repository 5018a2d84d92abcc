// SPDX-License-Identifier: MIT OR Apache-2.0
// AttentionLayer: a decoder layer's self-attention over the model's paged KV cache (docs/layers.md,
// "The decoder"), a stateful Layer (core/layer.hpp) whose batch state is a SequenceBatch. For m rows of
// normalised hidden states x [m, hidden]:
//   q, k, v  projections under the layer's tier (linear/projection_set.hpp)      -> bf16 rows
//   bias     norm/bias_add on q, k, v when the model has biases (Qwen2)
//   q/k norm and RoPE: rope/qk_norm_rope when tried and present (Qwen3), else norm/rms_norm on
//            q and k rows of head_dim, then rope/rope; RoPE alone for the other families
//   append   attn/kv_append: k, v into this layer's pools at the batch's slots
//   attend   a decode batch: attn/attn_decode + attn_decode_combine for every sequence in one
//            launch pair; else attn/attn_prefill per run (a chunk after the sequence's past)
//   gate     a gated attention (Qwen3.5, Qwen3-Next): attn/output_gate, attn * sigmoid(x W_gate^T)
//   o        projection (+ norm/bias_add when the model has an o bias)          -> bf16 [m, hidden]
// Partial rotary (rope.rotary_dim < head_dim) runs as rope/rope over the whole head: at build the
// q and k rows (and q/k norm weights) of each head are permuted so that rotated dim i and its
// partner i + rotary_dim/2 sit head_dim/2 apart, the other dims given frequency 0 (cos 1, sin 0:
// unchanged, exactly). Scores q.k do not change under one permutation of both.
// Kernels are resolved once, in build(); every lookup leaves its audit row. METRALE_QK_NORM_ROPE=1
// is an explicit request for the fused kernel: a backend without it is a Refusal. Not reentrant
// (scratch buffers are the layer's); the Backend must outlive it.
#pragma once

#include "attention/attention_config.hpp"
#include "attention/attention_weights.hpp"
#include "state/sequence_batch.hpp"

#include "core/device_buffer.hpp"
#include "core/device_quant_matrix.hpp"
#include "core/layer.hpp"
#include "core/tier_request.hpp"
#include "linear/projection_set.hpp"

#include <metrale/backend.hpp>

#include <cstdint>
#include <vector>

namespace metrale::layers {

// What METRALE_QK_NORM_ROPE asks: unset tries the fused kernel, 1 requires it, 0 skips it.
enum class FusedQkNormRope { try_it, require, off };
FusedQkNormRope fused_qk_norm_rope_request();

struct AttentionKernels {
  ProjectionSet projections;  // q, k, v, o under the layer's tier
  KernelHandle bias_add;      // norm/bias_add: required when the model has biases, else not looked up
  KernelHandle qk_norm_rope;  // rope/qk_norm_rope: tried for q/k-norm models (null: the separate kernels)
  KernelHandle rms_norm;      // the separate q/k norm (null when the fused kernel serves): norm/rms_norm, or
                              // norm/rms_norm_zero_centred for a zero-centred model (never fused)
  KernelHandle output_gate;   // attn/output_gate: required for a gated attention, else not looked up
  KernelHandle rope;          // rope/rope (null when the fused kernel serves)
  KernelHandle kv_append, decode, decode_combine, prefill;  // attn, required
};

class AttentionLayer final : public Layer {
 public:
  // Resolves the kernels only (audit rows, no memory).
  static AttentionKernels resolve(Backend& backend, const AttentionConfig& config, WeightFormat format, bool act_order,
                                  const ActivationRequest& activations = {});
  // Resolves, then uploads `weights` (checked against `config`). `layer` picks this layer's pools
  // in the KV cache the batches carry.
  static AttentionLayer build(Backend& backend, const AttentionConfig& config, const AttentionWeights& weights,
                              uint32_t layer, const ActivationRequest& activations = {});

  // batch.state must be a SequenceBatch over a cache of this layer's shape; bf16 [m, hidden] out in the
  // layer's buffer (valid until its next forward).
  DevicePtr forward(const LayerBatch& batch, uint64_t stream = 0) override;
  // The same into caller memory (bf16 [m, hidden]).
  void forward_into(const SequenceBatch& kv, DevicePtr x, DevicePtr out, uint64_t stream = 0);
  std::vector<PlanStep> plan(uint32_t m) const override;

  const AttentionConfig& config() const noexcept { return config_; }
  const AttentionKernels& kernels() const noexcept { return kernels_; }
  ActivationQuant activations() const noexcept { return kernels_.projections.activations; }
  size_t weight_bytes() const noexcept;

 private:
  AttentionLayer() = default;
  void check_cache(const StatePool& cache) const;
  void attend(const SequenceBatch& kv, uint64_t stream);

  Backend* backend_ = nullptr;
  AttentionConfig config_;
  uint32_t layer_ = 0;
  float rope_scaling_ = 1.0f;
  AttentionKernels kernels_;
  DeviceQuantMatrix q_, k_, v_, o_, gate_;
  DeviceBuffer q_bias_, k_bias_, v_bias_, o_bias_, q_norm_, k_norm_, inv_freq_;
  DeviceBuffer q_out_, k_out_, v_out_, attn_out_, out_, partials_, gate_out_;
  ProjectionScratch scratch_;
};

}  // namespace metrale::layers
