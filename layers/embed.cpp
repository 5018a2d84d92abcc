// SPDX-License-Identifier: MIT OR Apache-2.0
#include "embed.hpp"

#include "core/levers.hpp"

#include <metrale/levers.hpp>
#include <metrale/log.hpp>
#include <metrale/status.hpp>

#include <string>
#include <utility>

namespace metrale::layers {

Registry open_runtime(const DiscoveryOptions& options) {
  // As the CLI starts: the layers' levers first, so a bad value of one is refused up front; the
  // manifests' levers are declared by scan(), so their values are checked after it.
  register_levers();
  validate_levers();
  configure_logging();  // METRALE_LOG, now that its value is known to be valid
  Registry registry = Registry::scan(options);
  validate_levers();
  for (const auto& unknown : unknown_levers())
    logger()->warn("unknown lever {} (did you mean {}?)", unknown.name, unknown.nearest);
  registry.load();
  return registry;
}

ActivationRequest checkpoint_activations(const LoadedCheckpoint& checkpoint, std::string_view asked) {
  if (!asked.empty()) {
    const auto tier = parse_activation_quant(asked);
    if (!tier) {
      throw Refusal("activation tier '" + std::string(asked) + "' is not valid: expected bf16, int8 or fp8");
    }
    return ActivationRequest{*tier, true, "activations " + std::string(asked) + " (asked by the program)"};
  }
  return activation_request({}, declared_activation_tier(checkpoint.quant), checkpoint.quant.source);
}

namespace {

std::shared_ptr<Backend> checked_backend(std::shared_ptr<Backend> backend) {
  if (!backend) throw Error(Status::invalid_argument, "EmbeddedFfn: the backend is null (Registry::select or find gives one)");
  return backend;
}

}  // namespace

EmbeddedFfn::EmbeddedFfn(std::shared_ptr<Backend> backend, const ModelConfig& config, const FfnWeights& weights,
                         const FfnBuildOptions& options)
    : backend_(checked_backend(std::move(backend))), config_(config) {
  const uint64_t before = backend_->audit().last_sequence();
  ffn_ = FfnComponent::build(*backend_, config_, weights, options);
  for (auto& row : backend_->audit().snapshot()) {
    if (row.sequence > before && row.backend == backend_->name()) build_audit_.push_back(std::move(row));
  }
}

EmbeddedFfn::EmbeddedFfn(std::shared_ptr<Backend> backend, const LoadedCheckpoint& checkpoint,
                         std::string_view activations)
    : EmbeddedFfn(std::move(backend), checkpoint.config, checkpoint.weights,
                  FfnBuildOptions{{}, checkpoint_activations(checkpoint, activations)}) {}

std::vector<uint16_t> EmbeddedFfn::forward_host(std::span<const uint16_t> x, uint32_t m, uint64_t stream) {
  const size_t values = size_t{m} * config_.hidden_size;
  if (m == 0 || x.size() != values) {
    throw Error(Status::invalid_argument, "EmbeddedFfn::forward_host: " + config_.source + " takes m rows of hidden_size " +
                                              std::to_string(config_.hidden_size) + " bf16 values; got " +
                                              std::to_string(x.size()) + " values for m = " + std::to_string(m));
  }
  x_.ensure(*backend_, x.size_bytes());
  x_.upload(x, 0, stream);
  const DevicePtr y = ffn_.forward(x_.ptr(), m, stream);
  std::vector<uint16_t> out(values);
  backend_->copy_to_host(out.data(), y, out.size() * sizeof(uint16_t), stream);
  backend_->synchronize(stream);
  return out;
}

void EmbeddedFfn::forward_into(DevicePtr x, uint32_t m, DevicePtr out, uint64_t stream) {
  if (auto* dense = ffn_.dense()) return dense->forward_into(x, m, out, stream);
  if (auto* moe = ffn_.moe()) return moe->forward_into(x, m, out, stream);
  if (out != x) backend_->copy_device(out, x, size_t{m} * config_.hidden_size * sizeof(uint16_t), stream);
}

}  // namespace metrale::layers
