// SPDX-License-Identifier: MIT OR Apache-2.0
// MoeLayer: routed experts (docs/layers.md, "MoeLayer"):
//   router   moe/router_gemm     logits f32 [m, E] = x * Wr^T (Wr f32 [E, H])
//   top-k    moe/topk_softmax    softmax over E, k largest (ties: lower id), renormalised when
//                                norm_topk_prob
//   routing  moe/moe_align on the device when the backend has it and the experts run grouped;
//            else on the host: rows grouped by expert (offsets [E+1]), a slot per (token, choice)
//   gather   moe/moe_gather      x rows in expert order, bf16 [T = m*k, H]
//   experts  the experts' family's grouped GEMM (moe/w4a16_grouped_gemm for W4A16): gate_up -> act
//            -> grouped down, bf16 [T, H]; FP8 experts at decode may take the cross-row grouped
//            decode (fp8/fp8_grouped_gemv); without a grouped kernel: one projection launch per
//            expert that received rows
//   shared   an optional shared expert (a DenseFfnLayer), scaled by sigmoid(x * g) when the
//            weights carry shared_expert_gate, else added as is
//   combine  moe/moe_combine     out[r] = sum_j w[r][j] * expert_out[slot[r][j]]
// Same threading and lifetime rules as DenseFfnLayer.
#pragma once

#include "io/config.hpp"
#include "ffn/dense_ffn.hpp"
#include "core/device_quant_matrix.hpp"
#include "linear/projection.hpp"
#include "linear/projection_set.hpp"
#include "io/weights.hpp"

#include <metrale/backend.hpp>

#include <optional>
#include <vector>

namespace metrale::layers {

struct MoeBuildOptions {
  // false: skip the grouped-expert kernel (no lookup) and launch per expert, as a backend without
  // it would; for tests and benchmarks of the fallback.
  bool use_grouped_kernel = true;
};

// What METRALE_FP8_MOE_GROUPED_DECODE asks: unset tries the cross-row grouped FP8 decode, 1
// requires it (a Refusal when the experts are not FP8 or the backend lacks it), 0 skips it.
enum class GroupedDecodeRequest { try_it, require, off };
GroupedDecodeRequest grouped_decode_request();

struct MoeKernels {
  KernelHandle router_gemm;  // required
  KernelHandle topk_softmax; // required
  KernelHandle gather;       // required
  KernelHandle combine;      // required
  KernelHandle act;          // required
  KernelHandle align;        // moe/moe_align, try; used with a grouped kernel: routing stays on the device
  ProjectionSet experts;     // the experts' family: grouped GEMM in experts.kernels().grouped (null ->
                             // per-expert launches), the cross-row decode in experts.kernels().grouped_gemv
  bool grouped() const noexcept { return static_cast<bool>(experts.kernels().grouped); }
  bool device_routing() const noexcept { return align && grouped(); }
};

class MoeLayer {
 public:
  // Resolves the kernels only (audit rows, no memory). Throws Error(incompatible) when an expert
  // kernel cannot read the layout the weights will be in.
  static MoeKernels resolve(Backend& backend, const ModelConfig& config, const MoeBuildOptions& options = {});
  // The same for experts in `format` (act_order: they carry a permutation).
  static MoeKernels resolve(Backend& backend, const ModelConfig& config, const MoeBuildOptions& options,
                            WeightFormat format, bool act_order, const ActivationRequest& activations);
  // `activations`: the tier of the experts and the shared expert (projection_set.hpp).
  static MoeLayer build(Backend& backend, const ModelConfig& config, const MoeWeights& weights,
                        const MoeBuildOptions& options = {}, const ActivationRequest& activations = {});

  DevicePtr forward(DevicePtr x, uint32_t m, uint64_t stream = 0);
  DevicePtr forward_decode(DevicePtr x, uint64_t stream = 0);
  DevicePtr forward_batched(DevicePtr x, uint32_t m, uint64_t stream = 0);
  DevicePtr forward_prefill(DevicePtr x, uint32_t m, uint64_t stream = 0);
  void forward_into(DevicePtr x, uint32_t m, DevicePtr out, uint64_t stream = 0);

  std::vector<PlanStep> plan(uint32_t m) const;
  const MoeKernels& kernels() const noexcept { return kernels_; }
  bool grouped() const noexcept { return kernels_.grouped(); }
  // The activation tiers of the experts and of the shared expert (after any fallback).
  ActivationQuant expert_activations() const noexcept { return kernels_.experts.activations; }
  std::optional<ActivationQuant> shared_activations() const noexcept {
    return shared_ ? std::optional(shared_->activations()) : std::nullopt;
  }
  const DenseFfnLayer* shared_expert() const noexcept { return shared_ ? &*shared_ : nullptr; }
  // Rows each expert received in the last forward (size E). With routing on the device this
  // copies the offsets back now, outside the forward pass.
  const std::vector<uint32_t>& last_expert_rows();
  // Weight bytes the last forward had to read: router, the experts that received rows, the
  // shared expert and its gate.
  size_t last_weight_bytes();
  size_t weight_bytes() const noexcept;

 private:
  MoeLayer() = default;
  void launch_experts(DevicePtr x_grouped, uint32_t total_rows, uint32_t m, uint64_t stream);
  void route_on_host(uint32_t m, uint64_t stream);
  void route_on_device(DevicePtr x, uint32_t m, uint64_t stream);
  DevicePtr host_combine_weights(DevicePtr x, uint32_t m, uint64_t stream);

  Backend* backend_ = nullptr;
  uint32_t hidden_ = 0;
  uint32_t intermediate_ = 0;
  uint32_t experts_ = 0;
  uint32_t top_k_ = 0;
  bool renormalize_ = false;
  Activation activation_ = Activation::silu;
  MoeKernels kernels_;
  DeviceBuffer router_;       // f32 [E, H]
  DeviceQuantMatrix gate_up_;       // E x [2I, H]
  DeviceQuantMatrix down_;          // E x [H, I]
  std::optional<DenseFfnLayer> shared_;
  DeviceBuffer shared_gate_;  // f32 [1, H], empty when ungated
  bool shared_gated_ = false;

  // Scratch, grown to the largest m seen.
  DeviceBuffer logits_, ids_, weights_, rows_, offsets_, slots_, combine_weights_, gate_logits_, active_;
  DeviceBuffer x_grouped_, gate_up_out_, act_out_, expert_out_, out_;
  ProjectionScratch scratch_;
  std::vector<int32_t> host_ids_, host_rows_, host_offsets_, host_slots_;
  std::vector<float> host_weights_, host_combine_, host_gate_;
  std::vector<uint32_t> counts_;
  bool counts_stale_ = false;  // routed on the device: counts_ not read back yet
};

}  // namespace metrale::layers
