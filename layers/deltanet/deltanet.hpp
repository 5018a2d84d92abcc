// SPDX-License-Identifier: MIT OR Apache-2.0
// DeltaNetLayer: the Gated DeltaNet token mixer of Qwen3.5 and Qwen3-Next (docs/layers.md, "The
// hybrid layer"), a stateful Layer whose batch state is a SequenceBatch over a StatePool with
// recurrent slots. For m rows of normalised hidden states x [m, hidden]:
//   qkv0 = x W_qkv^T; z = x W_z^T; a = x W_a^T; b = x W_b^T     projections under the layer's tier
//          (a and b in their own set where the checkpoint stores them in another format)
//   qkv  = deltanet/conv_silu(qkv0)        the causal conv per run, its window in the sequence's slot
//   o    = deltanet/delta_rule_recurrent   a decode batch (every run one row): all sequences at once
//          deltanet/delta_rule_chunked     anything else: each run in chunks of 64
//   n    = deltanet/gated_norm(o, z)       per value head
//   out  = n W_out^T                                                    -> bf16 [m, hidden]
// METRALE_DELTANET_PREFILL=recurrent runs prompts with the recurrent kernel too (a lever, audited;
// chunked is the default). Kernels are resolved once, in build(); every lookup leaves its audit
// row. Not reentrant (scratch buffers are the layer's); the Backend must outlive it.
#pragma once

#include "deltanet/deltanet_config.hpp"
#include "deltanet/deltanet_weights.hpp"
#include "state/sequence_batch.hpp"

#include "core/device_buffer.hpp"
#include "core/device_quant_matrix.hpp"
#include "core/layer.hpp"
#include "core/tier_request.hpp"
#include "linear/projection_set.hpp"

#include <metrale/backend.hpp>

#include <cstdint>
#include <optional>
#include <vector>

namespace metrale::layers {

struct DeltaNetKernels {
  ProjectionSet projections;       // in_proj_qkv, _z, out_proj (and _a, _b) under the layer's tier
  ProjectionSet ab;                // in_proj_a, _b: `projections`, or their own set where their format differs
  KernelHandle conv;               // deltanet/conv_silu
  KernelHandle prefill;            // deltanet/delta_rule_chunked (or _recurrent under the lever)
  KernelHandle decode;             // deltanet/delta_rule_recurrent
  KernelHandle gated_norm;         // deltanet/gated_norm
};

class DeltaNetLayer final : public Layer {
 public:
  // Resolves the kernels only (audit rows, no memory). `ab_format` (with `ab_act_order`): the
  // format of in_proj_a and in_proj_b where it is not `format` (a checkpoint that left them in
  // bf16), resolved as a second projection set "deltanet.ab" under the same activation request.
  static DeltaNetKernels resolve(Backend& backend, const DeltaNetConfig& config, WeightFormat format, bool act_order,
                                 const ActivationRequest& activations = {},
                                 std::optional<WeightFormat> ab_format = std::nullopt, bool ab_act_order = false);
  // Resolves, then uploads `weights` (checked against `config`). `state_layer` picks this layer's
  // recurrent slots in the pools the batches carry.
  static DeltaNetLayer build(Backend& backend, const DeltaNetConfig& config, const DeltaNetWeights& weights,
                             uint32_t state_layer, const ActivationRequest& activations = {});

  DevicePtr forward(const LayerBatch& batch, uint64_t stream = 0) override;
  // The same into caller memory (bf16 [m, hidden]).
  void forward_into(const SequenceBatch& batch, DevicePtr x, DevicePtr out, uint64_t stream = 0);
  std::vector<PlanStep> plan(uint32_t m) const override;

  const DeltaNetConfig& config() const noexcept { return config_; }
  const DeltaNetKernels& kernels() const noexcept { return kernels_; }
  size_t weight_bytes() const noexcept;

 private:
  DeltaNetLayer() = default;
  void check_pool(const StatePool& pool) const;

  Backend* backend_ = nullptr;
  DeltaNetConfig config_;
  uint32_t state_layer_ = 0;
  DeltaNetKernels kernels_;
  DeviceQuantMatrix qkv_, z_, a_, b_, out_;
  DeviceBuffer conv_, a_log_, dt_bias_, norm_;
  DeviceBuffer mixed_, qkv_out_, z_out_, a_out_, b_out_, core_, result_;
  ProjectionScratch scratch_;
};

}  // namespace metrale::layers
