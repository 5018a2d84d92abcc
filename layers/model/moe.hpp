// SPDX-License-Identifier: MIT OR Apache-2.0
// MoeLayer: routed experts (docs/layers.md, "MoeLayer"):
//   router   moe/router_gemm     logits f32 [m, E] = x * Wr^T (Wr f32 [E, H])
//   top-k    moe/topk_softmax    softmax over E, k largest (ties: lower id), renormalised when
//                                norm_topk_prob
//   routing  on the host: rows grouped by expert (offsets [E+1]), a slot per (token, choice)
//   gather   moe/moe_gather      x rows in expert order, bf16 [T = m*k, H]
//   experts  moe/w4a16_grouped_gemm gate_up -> act -> grouped down, bf16 [T, H]; without the
//            grouped kernel: one dense projection launch per expert that received rows
//   shared   an optional shared expert (a DenseFfnLayer), scaled by sigmoid(x * g) when the
//            weights carry shared_expert_gate, else added as is
//   combine  moe/moe_combine     out[r] = sum_j w[r][j] * expert_out[slot[r][j]]
// Same threading and lifetime rules as DenseFfnLayer.
#pragma once

#include "config.hpp"
#include "dense_ffn.hpp"
#include "device_buffer.hpp"
#include "projection.hpp"
#include "weights.hpp"

#include <metrale/backend.hpp>

#include <optional>
#include <vector>

namespace metrale::layers {

struct MoeBuildOptions {
  // false: skip the grouped-expert kernel (no lookup) and launch per expert, as a backend without
  // it would; for tests and benchmarks of the fallback.
  bool use_grouped_kernel = true;
};

struct MoeKernels {
  KernelHandle router_gemm;  // required
  KernelHandle topk_softmax; // required
  KernelHandle gather;       // required
  KernelHandle grouped;      // try; null -> per-expert launches
  KernelHandle combine;      // required
  KernelHandle act;          // required
  KernelHandle repack;       // w4a16/w4a16_repack, try; null: the expert weights stay canonical
  ProjectionKernels per_expert;  // resolved only when grouped is null
};

class MoeLayer {
 public:
  // Resolves the kernels only (audit rows, no memory). Throws Error(incompatible) when an expert
  // kernel cannot read the layout the weights will be in.
  static MoeKernels resolve(Backend& backend, const ModelConfig& config, const MoeBuildOptions& options = {});
  static MoeLayer build(Backend& backend, const ModelConfig& config, const MoeWeights& weights,
                        const MoeBuildOptions& options = {});

  DevicePtr forward(DevicePtr x, uint32_t m, uint64_t stream = 0);
  DevicePtr forward_decode(DevicePtr x, uint64_t stream = 0);
  DevicePtr forward_batched(DevicePtr x, uint32_t m, uint64_t stream = 0);
  DevicePtr forward_prefill(DevicePtr x, uint32_t m, uint64_t stream = 0);
  void forward_into(DevicePtr x, uint32_t m, DevicePtr out, uint64_t stream = 0);

  std::vector<PlanStep> plan(uint32_t m) const;
  const MoeKernels& kernels() const noexcept { return kernels_; }
  bool grouped() const noexcept { return static_cast<bool>(kernels_.grouped); }
  // Rows each expert received in the last forward (size E).
  const std::vector<uint32_t>& last_expert_rows() const noexcept { return counts_; }
  // Weight bytes the last forward had to read: router, the experts that received rows, the
  // shared expert and its gate.
  size_t last_weight_bytes() const noexcept;
  size_t weight_bytes() const noexcept;

 private:
  MoeLayer() = default;
  void launch_experts(DevicePtr x_grouped, uint32_t total_rows, uint64_t stream);

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
  DeviceBuffer logits_, ids_, weights_, rows_, offsets_, slots_, combine_weights_, gate_logits_;
  DeviceBuffer x_grouped_, gate_up_out_, act_out_, expert_out_, out_;
  std::vector<int32_t> host_ids_, host_rows_, host_offsets_, host_slots_;
  std::vector<float> host_weights_, host_combine_, host_gate_;
  std::vector<uint32_t> counts_;
};

}  // namespace metrale::layers
