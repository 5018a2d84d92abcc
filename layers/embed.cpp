// SPDX-License-Identifier: MIT OR Apache-2.0
#include "embed.hpp"

#include "compose.hpp"
#include "core/device_buffer.hpp"
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

namespace {

std::shared_ptr<Backend> checked_backend(std::shared_ptr<Backend> backend) {
  if (!backend) throw Error(Status::invalid_argument, "EmbeddedFfn: the backend is null (Registry::select or find gives one)");
  return backend;
}

LayerInfo info_of(const OpenedLayer& layer) {
  const LayerSource& s = layer.source;
  return LayerInfo{.model = s.config.source,
                   .weights_source = s.weights_source,
                   .layer = s.layer,
                   .declared = s.declared,
                   .quantization = s.quantization,
                   .activations = std::string(activation_quant_name(layer.activations.tier)),
                   .activations_source = layer.activations.source,
                   .tiers = layer.tiers()};
}

}  // namespace

// The layer and what the public API hands out about it; the backend is declared first so that it
// is destroyed after the layer and the buffers made on it.
struct EmbeddedFfn::Impl {
  std::shared_ptr<Backend> backend;
  OpenedLayer layer;
  LayerInfo info;
  DeviceBuffer x;  // forward_host's input rows, grown to the largest m seen

  Impl(std::shared_ptr<Backend> b, const LayerRequest& request)
      : backend(checked_backend(std::move(b))), layer(open_layer(*backend, request)), info(info_of(layer)) {
    layer.source.weights = {};  // on the device now: a checkpoint's host copy would double its memory
  }
};

EmbeddedFfn::EmbeddedFfn(std::shared_ptr<Backend> backend, const LayerRequest& request)
    : impl_(std::make_unique<Impl>(std::move(backend), request)) {}

EmbeddedFfn::~EmbeddedFfn() = default;
EmbeddedFfn::EmbeddedFfn(EmbeddedFfn&& other) noexcept = default;
EmbeddedFfn& EmbeddedFfn::operator=(EmbeddedFfn&& other) noexcept = default;

std::vector<uint16_t> EmbeddedFfn::forward_host(std::span<const uint16_t> x, uint32_t m, uint64_t stream) {
  const ModelConfig& config = impl_->layer.source.config;
  const size_t values = size_t{m} * config.hidden_size;
  if (m == 0 || x.size() != values) {
    throw Error(Status::invalid_argument, "EmbeddedFfn::forward_host: " + config.source + " takes m rows of hidden_size " +
                                              std::to_string(config.hidden_size) + " bf16 values; got " +
                                              std::to_string(x.size()) + " values for m = " + std::to_string(m));
  }
  Backend& backend = *impl_->backend;
  impl_->x.ensure(backend, x.size_bytes());
  impl_->x.upload(x, 0, stream);
  const DevicePtr y = impl_->layer.ffn.forward(impl_->x.ptr(), m, stream);
  std::vector<uint16_t> out(values);
  backend.copy_to_host(out.data(), y, out.size() * sizeof(uint16_t), stream);
  backend.synchronize(stream);
  return out;
}

void EmbeddedFfn::forward_into(DevicePtr x, uint32_t m, DevicePtr out, uint64_t stream) {
  FfnComponent& ffn = impl_->layer.ffn;
  if (auto* dense = ffn.dense()) return dense->forward_into(x, m, out, stream);
  if (auto* moe = ffn.moe()) return moe->forward_into(x, m, out, stream);
  if (out != x) impl_->backend->copy_device(out, x, size_t{m} * hidden_size() * sizeof(uint16_t), stream);
}

std::vector<PlanStep> EmbeddedFfn::plan(uint32_t m) const { return impl_->layer.ffn.plan(m); }

uint32_t EmbeddedFfn::hidden_size() const noexcept { return impl_->layer.source.config.hidden_size; }

const LayerInfo& EmbeddedFfn::info() const noexcept { return impl_->info; }

Backend& EmbeddedFfn::backend() const noexcept { return *impl_->backend; }

const std::vector<AuditRow>& EmbeddedFfn::build_audit() const noexcept { return impl_->layer.audit; }

struct EmbeddedModel::Impl {
  std::shared_ptr<Backend> backend;
  OpenedModel model;

  Impl(std::shared_ptr<Backend> b, const LayerRequest& request) : backend(std::move(b)), model(open_model(*backend, request)) {}
};

EmbeddedModel::EmbeddedModel(std::shared_ptr<Backend> backend, const LayerRequest& request) {
  if (!backend) throw Error(Status::invalid_argument, "EmbeddedModel: the backend is null (Registry::select or find gives one)");
  impl_ = std::make_unique<Impl>(std::move(backend), request);
}

EmbeddedModel::~EmbeddedModel() = default;
EmbeddedModel::EmbeddedModel(EmbeddedModel&& other) noexcept = default;
EmbeddedModel& EmbeddedModel::operator=(EmbeddedModel&& other) noexcept = default;

Generation EmbeddedModel::generate(const std::vector<std::vector<int32_t>>& prompts, uint32_t max_new_tokens,
                                   uint64_t kv_tokens) {
  GenerateOptions options;
  options.max_new_tokens = max_new_tokens;
  options.kv_tokens = kv_tokens;
  GenerateResult r = generate_tokens(*impl_->backend, *impl_->model.model, prompts, options);
  return Generation{std::move(r.generated), std::move(r.logits), r.stats.prefill_tokens, r.stats.decode_tokens,
                    r.stats.prefill_seconds, r.stats.decode_seconds};
}

uint32_t EmbeddedModel::vocab_size() const noexcept { return impl_->model.model->config().vocab_size; }
Backend& EmbeddedModel::backend() const noexcept { return *impl_->backend; }
const std::vector<AuditRow>& EmbeddedModel::build_audit() const noexcept { return impl_->model.audit; }

}  // namespace metrale::layers
