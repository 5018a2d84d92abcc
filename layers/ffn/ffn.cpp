// SPDX-License-Identifier: MIT OR Apache-2.0
#include "ffn/ffn.hpp"

#include <metrale/status.hpp>

namespace metrale::layers {

FfnComponent FfnComponent::build(Backend& backend, const ModelConfig& config, const FfnWeights& weights,
                                 const FfnBuildOptions& options) {
  weights.validate(config);
  FfnComponent ffn;
  switch (config.ffn_kind()) {
    case FfnKind::none: break;
    case FfnKind::dense:
      ffn.impl_.emplace<DenseFfnLayer>(DenseFfnLayer::build(backend, config, *weights.dense, options.activations));
      break;
    case FfnKind::moe:
      ffn.impl_.emplace<MoeLayer>(MoeLayer::build(backend, config, *weights.moe, options.moe, options.activations));
      break;
  }
  return ffn;
}

FfnKind FfnComponent::kind() const noexcept {
  if (std::holds_alternative<DenseFfnLayer>(impl_)) return FfnKind::dense;
  if (std::holds_alternative<MoeLayer>(impl_)) return FfnKind::moe;
  return FfnKind::none;
}

DevicePtr FfnComponent::forward(DevicePtr x, uint32_t m, uint64_t stream) {
  if (auto* d = dense()) return d->forward(x, m, stream);
  if (auto* e = moe()) return e->forward(x, m, stream);
  return x;
}

DevicePtr FfnComponent::forward_decode(DevicePtr x, uint64_t stream) {
  if (auto* d = dense()) return d->forward_decode(x, stream);
  if (auto* e = moe()) return e->forward_decode(x, stream);
  return x;
}

DevicePtr FfnComponent::forward_batched(DevicePtr x, uint32_t m, uint64_t stream) {
  if (auto* d = dense()) return d->forward_batched(x, m, stream);
  if (auto* e = moe()) return e->forward_batched(x, m, stream);
  return x;
}

DevicePtr FfnComponent::forward_prefill(DevicePtr x, uint32_t m, uint64_t stream) {
  if (auto* d = dense()) return d->forward_prefill(x, m, stream);
  if (auto* e = moe()) return e->forward_prefill(x, m, stream);
  return x;
}

std::vector<PlanStep> FfnComponent::plan(uint32_t m) const {
  if (auto* d = std::get_if<DenseFfnLayer>(&impl_)) return d->plan(m);
  if (auto* e = std::get_if<MoeLayer>(&impl_)) return e->plan(m);
  return {PlanStep{"ffn", "(none)", "no FFN: the input passes through, nothing is launched", {0, 0, 0}}};
}

std::vector<std::string> FfnComponent::tiers() const {
  std::vector<const ProjectionSet*> sets;
  if (auto* d = std::get_if<DenseFfnLayer>(&impl_)) sets.push_back(&d->kernels().projections);
  if (auto* e = std::get_if<MoeLayer>(&impl_)) {
    sets.push_back(&e->kernels().experts);
    if (const DenseFfnLayer* shared = e->shared_expert()) sets.push_back(&shared->kernels().projections);
  }
  std::vector<std::string> out;
  for (const ProjectionSet* set : sets)
    if (std::find(out.begin(), out.end(), set->tier) == out.end()) out.push_back(set->tier);
  return out;
}

void FfnComponent::reference_tiers(ReferenceOptions& options) const {
  if (auto* d = std::get_if<DenseFfnLayer>(&impl_)) {
    options.activations = d->activations();
    options.activation_scaling = d->kernels().projections.kernels().scaling;
  }
  if (auto* e = std::get_if<MoeLayer>(&impl_)) {
    options.expert_activations = e->expert_activations();
    options.activations = e->shared_activations().value_or(e->expert_activations());
    options.activation_scaling = e->kernels().experts.kernels().scaling;  // one request for every set
  }
}

size_t FfnComponent::weight_bytes() const noexcept {
  if (auto* d = std::get_if<DenseFfnLayer>(&impl_)) return d->weight_bytes();
  if (auto* e = std::get_if<MoeLayer>(&impl_)) return e->weight_bytes();
  return 0;
}

size_t FfnComponent::last_weight_bytes() {
  if (auto* e = std::get_if<MoeLayer>(&impl_)) return e->last_weight_bytes();
  return weight_bytes();
}

std::vector<AuditRow> build_ffn_for_audit(Backend& backend, const ModelConfig& config, const FfnBuildOptions& options,
                                          const SyntheticFormats& formats) {
  config.validate();
  const uint64_t before = backend.audit().last_sequence();
  DenseFfnTier dense_tier{formats.weights, formats.act_order, options.activations, config.mlp_bias};
  switch (config.ffn_kind()) {
    case FfnKind::none: break;
    case FfnKind::dense:
      DenseFfnLayer::resolve(backend, "ffn", config.hidden_size, config.intermediate_size, config.activation,
                             config.model_type, dense_tier);
      break;
    case FfnKind::moe:
      MoeLayer::resolve(backend, config, options.moe, formats.experts.value_or(formats.weights), formats.act_order,
                        options.activations);
      if (config.shared_expert_intermediate_size > 0) {
        dense_tier.biases = false;  // mlp_bias is a dense architecture's key
        DenseFfnLayer::resolve(backend, "ffn.shared_expert", config.hidden_size, config.shared_expert_intermediate_size,
                               config.activation, config.model_type, dense_tier);
      }
      break;
  }
  std::vector<AuditRow> rows;
  for (auto& row : backend.audit().snapshot()) {
    if (row.sequence > before && row.backend == backend.name()) rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace metrale::layers
