// SPDX-License-Identifier: MIT OR Apache-2.0
// FfnComponent: a layer's FFN — MoE, dense, or none (docs/layers.md, "FfnComponent"), a stateless
// Layer (core/layer.hpp). None returns its input and launches nothing. build_ffn_for_audit
// resolves the same kernels as build() without uploading or running anything.
#pragma once

#include "core/layer.hpp"
#include "io/config.hpp"
#include "ffn/dense_ffn.hpp"
#include "ffn/moe.hpp"
#include "reference/reference.hpp"
#include "io/weights.hpp"

#include <metrale/audit.hpp>
#include <metrale/backend.hpp>

#include <variant>
#include <vector>

namespace metrale::layers {

struct FfnBuildOptions {
  MoeBuildOptions moe;
  ActivationRequest activations;  // the layer's activation tier (projection_set.hpp)
};

class FfnComponent final : public Layer {
 public:
  FfnComponent() = default;  // None
  static FfnComponent none() { return FfnComponent(); }
  // The kind follows the config; `weights` must match it (checked).
  static FfnComponent build(Backend& backend, const ModelConfig& config, const FfnWeights& weights,
                            const FfnBuildOptions& options = {});

  FfnKind kind() const noexcept;
  bool is_none() const noexcept { return kind() == FfnKind::none; }
  DenseFfnLayer* dense() noexcept { return std::get_if<DenseFfnLayer>(&impl_); }
  MoeLayer* moe() noexcept { return std::get_if<MoeLayer>(&impl_); }

  // bf16 [m, H] in, bf16 [m, H] out (a buffer the layer owns; for None, `x` itself).
  DevicePtr forward(DevicePtr x, uint32_t m, uint64_t stream = 0);
  DevicePtr forward(const LayerBatch& batch, uint64_t stream = 0) override { return forward(batch.x, batch.m, stream); }
  DevicePtr forward_decode(DevicePtr x, uint64_t stream = 0);
  DevicePtr forward_batched(DevicePtr x, uint32_t m, uint64_t stream = 0);
  DevicePtr forward_prefill(DevicePtr x, uint32_t m, uint64_t stream = 0);

  std::vector<PlanStep> plan(uint32_t m) const override;
  // Each projection set's tier as the audit describes it ("w4a8: int8 activations (...)"), once.
  std::vector<std::string> tiers() const;
  // The activation tiers the layer ended at, as the reference must compute them.
  void reference_tiers(ReferenceOptions& options) const;
  size_t weight_bytes() const noexcept;
  // Weight bytes the last forward read (for a MoE: only the experts that received rows).
  size_t last_weight_bytes();

 private:
  std::variant<std::monostate, DenseFfnLayer, MoeLayer> impl_;
};

// Resolves every kernel the FFN of `config` asks for on `backend` (same code as build(); no
// memory, no launches) for weights in `formats` under `options.activations`, and returns the
// audit rows those lookups appended. Throws what build() would throw (a required kernel missing,
// a Refusal for an unmet lever or an explicit tier the backend lacks).
std::vector<AuditRow> build_ffn_for_audit(Backend& backend, const ModelConfig& config,
                                          const FfnBuildOptions& options = {}, const SyntheticFormats& formats = {});

}  // namespace metrale::layers
