// SPDX-License-Identifier: MIT OR Apache-2.0
#include "ffn/dense_ffn.hpp"

#include "core/device_buffer.hpp"
#include "core/launch_shape.hpp"
#include "linear/bias.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/status.hpp>

namespace metrale::layers {

KernelHandle resolve_act(Backend& backend, Activation activation, std::source_location site) {
  constexpr auto kSilu = catalogue::signature("act", "silu_mul"), kGelu = catalogue::signature("act", "gelu_mul");
  const bool silu = activation == Activation::silu;
  Backend::LookupRequest request{
      .kind = LookupKind::require, .expected = silu ? kSilu : kGelu, .lever = {}, .refuse_because = {}, .annotations = {}};
  return backend.lookup("act", silu ? "silu_mul" : "gelu_mul", request, site);
}

void launch_act(Backend& backend, KernelHandle act, DevicePtr gate_up, DevicePtr out, uint32_t m, uint32_t intermediate,
                uint64_t stream) {
  backend.launch(act, launch_shape({ceil_div(intermediate, 1024), m, 1}, 256, stream), gate_up, out, m, intermediate);
}

DenseFfnKernels DenseFfnLayer::resolve(Backend& backend, const std::string& name, uint32_t hidden, uint32_t intermediate,
                                       Activation activation, std::string_view model_type, const DenseFfnTier& tier) {
  ProjectionSetRequest request;
  request.name = name;
  request.format = tier.format;
  request.act_order = tier.act_order;
  request.shapes = {ProjectionShape{name + ".gate_up", 2 * intermediate, hidden},
                    ProjectionShape{name + ".down", hidden, intermediate}};
  request.model_type = std::string(model_type);
  request.activations = tier.activations;
  DenseFfnKernels k;
  k.projections = resolve_projection_set(backend, request);
  k.act = resolve_act(backend, activation, std::source_location::current());
  if (tier.biases) k.bias_add = resolve_bias_add(backend);
  return k;
}

DenseFfnLayer DenseFfnLayer::build(Backend& backend, const std::string& name, const DenseFfnWeights& weights,
                                   Activation activation, std::string_view model_type, const ActivationRequest& activations) {
  weights.validate(weights.hidden(), weights.intermediate());
  DenseFfnLayer layer;
  layer.backend_ = &backend;
  layer.name_ = name;
  layer.hidden_ = weights.hidden();
  layer.intermediate_ = weights.intermediate();
  layer.activation_ = activation;
  const DenseFfnTier tier{weights.format(), weights.act_order(), activations, weights.has_bias()};
  layer.kernels_ = resolve(backend, name, layer.hidden_, layer.intermediate_, activation, model_type, tier);
  layer.gate_up_ = layer.kernels_.projections.upload(backend, weights.gate_up);
  layer.down_ = layer.kernels_.projections.upload(backend, weights.down);
  layer.gate_up_bias_ = device_copy(backend, weights.gate_up_bias);
  layer.down_bias_ = device_copy(backend, weights.down_bias);
  // Uploads may be asynchronous; the caller may free the host weights once build returns.
  backend.synchronize();
  return layer;
}

DenseFfnLayer DenseFfnLayer::build(Backend& backend, const ModelConfig& config, const DenseFfnWeights& weights,
                                   const ActivationRequest& activations) {
  weights.validate(config.hidden_size, config.intermediate_size);
  return build(backend, "ffn", weights, config.activation, config.model_type, activations);
}

void DenseFfnLayer::forward_into(DevicePtr x, uint32_t m, DevicePtr out, uint64_t stream) {
  if (m == 0) throw Error(Status::invalid_argument, name_ + ": forward needs m >= 1 rows");
  Backend& b = *backend_;
  gate_up_out_.ensure(b, size_t{m} * 2 * intermediate_ * kBf16);
  act_out_.ensure(b, size_t{m} * intermediate_ * kBf16);
  run_projection(b, kernels_.projections, gate_up_, 0, x, gate_up_out_.ptr(), m, scratch_, stream);
  add_bias(b, kernels_.bias_add, gate_up_bias_, gate_up_out_.ptr(), m, 2 * intermediate_, stream);
  launch_act(b, kernels_.act, gate_up_out_.ptr(), act_out_.ptr(), m, intermediate_, stream);
  run_projection(b, kernels_.projections, down_, 0, act_out_.ptr(), out, m, scratch_, stream);
  add_bias(b, kernels_.bias_add, down_bias_, out, m, hidden_, stream);
}

DevicePtr DenseFfnLayer::forward(DevicePtr x, uint32_t m, uint64_t stream) {
  out_.ensure(*backend_, size_t{m} * hidden_ * kBf16);
  forward_into(x, m, out_.ptr(), stream);
  return out_.ptr();
}

DevicePtr DenseFfnLayer::forward_decode(DevicePtr x, uint64_t stream) { return forward(x, 1, stream); }

DevicePtr DenseFfnLayer::forward_batched(DevicePtr x, uint32_t m, uint64_t stream) {
  if (m == 0 || m > 8) {
    throw Error(Status::invalid_argument, name_ + ": batched decode takes 1..8 rows, got " + std::to_string(m));
  }
  return forward(x, m, stream);
}

DevicePtr DenseFfnLayer::forward_prefill(DevicePtr x, uint32_t m, uint64_t stream) { return forward(x, m, stream); }

std::vector<PlanStep> DenseFfnLayer::plan(uint32_t m) const {
  Backend& b = *backend_;
  std::vector<PlanStep> steps;
  const bool biases = gate_up_bias_.bytes() > 0;
  steps.push_back(describe_set_projection(b, kernels_.projections, name_ + ".gate_up", m, 2 * intermediate_, hidden_));
  if (biases) steps.push_back(PlanStep{name_ + ".gate_up_bias", b.kernel_name(kernels_.bias_add), "gate and up biases", {m, 1, 1}});
  steps.push_back(PlanStep{name_ + ".act", b.kernel_name(kernels_.act), activation_name(activation_),
                           {ceil_div(intermediate_, 1024), m, 1}});
  steps.push_back(describe_set_projection(b, kernels_.projections, name_ + ".down", m, hidden_, intermediate_));
  if (biases) steps.push_back(PlanStep{name_ + ".down_bias", b.kernel_name(kernels_.bias_add), "down bias", {m, 1, 1}});
  return steps;
}

size_t DenseFfnLayer::weight_bytes() const noexcept {
  return gate_up_.bytes_per_matrix() + down_.bytes_per_matrix() + gate_up_bias_.bytes() + down_bias_.bytes();
}

}  // namespace metrale::layers
