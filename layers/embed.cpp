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
  return activation_request(TierAsk{std::string(asked), "activations"}, declared_activation_tier(checkpoint.quant),
                            checkpoint.quant.source);
}

namespace {

std::shared_ptr<Backend> checked_backend(std::shared_ptr<Backend> backend) {
  if (!backend) throw Error(Status::invalid_argument, "EmbeddedFfn: the backend is null (Registry::select or find gives one)");
  return backend;
}

// The program's tier as a request: an explicit one is asked for, a default one is what the
// weights declare (so it falls back visibly, as a checkpoint's declaration does).
LayerSource with_default_tier(LayerSource source, const ActivationRequest& activations) {
  if (!activations.is_explicit && activations.tier != ActivationQuant::bf16) {
    source.declared_activations = activations.tier;
    source.declared_source = activations.source;
  }
  return source;
}

LayerRequest request_for(const FfnBuildOptions& options) {
  LayerRequest request;
  request.per_expert = !options.moe.use_grouped_kernel;
  if (options.activations.is_explicit) {
    request.activations = TierAsk{std::string(activation_quant_name(options.activations.tier)), "activations"};
  }
  return request;
}

}  // namespace

EmbeddedFfn::EmbeddedFfn(std::shared_ptr<Backend> backend, const LayerRequest& request)
    : backend_(checked_backend(std::move(backend))), layer_(open_layer(*backend_, request)) {}

EmbeddedFfn::EmbeddedFfn(std::shared_ptr<Backend> backend, LayerSource source, const LayerRequest& request)
    : backend_(checked_backend(std::move(backend))), layer_(open_layer(*backend_, std::move(source), request)) {}

EmbeddedFfn::EmbeddedFfn(std::shared_ptr<Backend> backend, const ModelConfig& config, const FfnWeights& weights,
                         const FfnBuildOptions& options)
    : EmbeddedFfn(std::move(backend), with_default_tier(layer_source(config, weights), options.activations),
                  request_for(options)) {}

EmbeddedFfn::EmbeddedFfn(std::shared_ptr<Backend> backend, const LoadedCheckpoint& checkpoint,
                         std::string_view activations)
    : EmbeddedFfn(std::move(backend), checkpoint_source(checkpoint),
                  [&] {
                    LayerRequest request;
                    request.activations = TierAsk{std::string(activations), "activations"};
                    return request;
                  }()) {}

std::vector<uint16_t> EmbeddedFfn::forward_host(std::span<const uint16_t> x, uint32_t m, uint64_t stream) {
  const ModelConfig& config_ = config();
  const size_t values = size_t{m} * config_.hidden_size;
  if (m == 0 || x.size() != values) {
    throw Error(Status::invalid_argument, "EmbeddedFfn::forward_host: " + config_.source + " takes m rows of hidden_size " +
                                              std::to_string(config_.hidden_size) + " bf16 values; got " +
                                              std::to_string(x.size()) + " values for m = " + std::to_string(m));
  }
  x_.ensure(*backend_, x.size_bytes());
  x_.upload(x, 0, stream);
  const DevicePtr y = layer_.ffn.forward(x_.ptr(), m, stream);
  std::vector<uint16_t> out(values);
  backend_->copy_to_host(out.data(), y, out.size() * sizeof(uint16_t), stream);
  backend_->synchronize(stream);
  return out;
}

void EmbeddedFfn::forward_into(DevicePtr x, uint32_t m, DevicePtr out, uint64_t stream) {
  if (auto* dense = layer_.ffn.dense()) return dense->forward_into(x, m, out, stream);
  if (auto* moe = layer_.ffn.moe()) return moe->forward_into(x, m, out, stream);
  if (out != x) backend_->copy_device(out, x, size_t{m} * config().hidden_size * sizeof(uint16_t), stream);
}

}  // namespace metrale::layers
