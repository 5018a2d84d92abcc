// SPDX-License-Identifier: MIT OR Apache-2.0
#include "deltanet/deltanet.hpp"

#include "core/launch_shape.hpp"
#include "core/levers.hpp"
#include "core/lookup_notes.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/levers.hpp>
#include <metrale/status.hpp>

#include <array>

namespace metrale::layers {

namespace {

constexpr uint32_t kBlock = 128;
constexpr std::string_view kPrefillLever = "METRALE_DELTANET_PREFILL";
using catalogue::signature;
constexpr auto kConvSig = signature("deltanet", "conv_silu");
constexpr auto kChunkedSig = signature("deltanet", "delta_rule_chunked");
constexpr auto kRecurrentSig = signature("deltanet", "delta_rule_recurrent");
constexpr auto kGatedNormSig = signature("deltanet", "gated_norm");

}  // namespace

DeltaNetKernels DeltaNetLayer::resolve(Backend& backend, const DeltaNetConfig& c, WeightFormat format, bool act_order,
                                       const ActivationRequest& activations, std::optional<WeightFormat> ab_format,
                                       bool ab_act_order) {
  DeltaNetKernels k;
  k.conv = backend.lookup("deltanet", "conv_silu", plain_request(LookupKind::require, kConvSig));
  register_levers();
  const auto prefill = lever_choice(kPrefillLever);
  const bool recurrent = prefill && *prefill == "recurrent";
  const char* name = recurrent ? "delta_rule_recurrent" : "delta_rule_chunked";
  Backend::LookupRequest r = plain_request(LookupKind::require, recurrent ? kRecurrentSig : kChunkedSig);
  if (prefill) {
    // Asked for by name: a backend without it is a refusal (exit 3), not a missing kernel (exit 1).
    r.kind = LookupKind::try_lookup;
    r.lever = lever_note(kPrefillLever);
    r.refuse_because = lever_note(kPrefillLever) + " asks for deltanet/" + name + " for the DeltaNet's prompts";
  }
  k.prefill = backend.lookup("deltanet", name, r);  // before decode's: a lever's refusal comes first
  k.decode = backend.lookup("deltanet", "delta_rule_recurrent", plain_request(LookupKind::require, kRecurrentSig));
  k.gated_norm = backend.lookup("deltanet", "gated_norm", plain_request(LookupKind::require, kGatedNormSig));
  ProjectionSetRequest request;
  request.name = "deltanet";
  request.format = format;
  request.act_order = act_order;
  const bool separate = ab_format && *ab_format != format;
  const std::vector<ProjectionShape> ab_shapes{ProjectionShape{"deltanet.a", c.v_heads, c.hidden_size},
                                               ProjectionShape{"deltanet.b", c.v_heads, c.hidden_size}};
  request.shapes = {ProjectionShape{"deltanet.qkv", c.conv_channels(), c.hidden_size},
                    ProjectionShape{"deltanet.z", c.value_width(), c.hidden_size},
                    ProjectionShape{"deltanet.out", c.hidden_size, c.value_width()}};
  if (!separate) request.shapes.insert(request.shapes.begin() + 2, ab_shapes.begin(), ab_shapes.end());
  request.activations = activations;
  k.projections = resolve_projection_set(backend, request);
  k.ab = k.projections;
  if (separate) {
    request.name = "deltanet.ab";
    request.format = *ab_format;
    request.act_order = ab_act_order;
    request.shapes = ab_shapes;
    k.ab = resolve_projection_set(backend, request);
  }
  return k;
}

DeltaNetLayer DeltaNetLayer::build(Backend& backend, const DeltaNetConfig& config, const DeltaNetWeights& weights,
                                   uint32_t state_layer, const ActivationRequest& activations) {
  weights.validate(config);
  DeltaNetLayer d;
  d.backend_ = &backend;
  d.config_ = config;
  d.state_layer_ = state_layer;
  d.kernels_ = resolve(backend, config, weights.format(), weights.act_order(), activations, weights.ab_format(),
                       weights.ab_act_order());
  const ProjectionSet& set = d.kernels_.projections;
  d.qkv_ = set.upload(backend, weights.qkv);
  d.z_ = set.upload(backend, weights.z);
  d.a_ = d.kernels_.ab.upload(backend, weights.a);
  d.b_ = d.kernels_.ab.upload(backend, weights.b);
  d.out_ = set.upload(backend, weights.out);
  d.conv_ = device_copy(backend, weights.conv);
  d.a_log_ = device_copy(backend, weights.a_log);
  d.dt_bias_ = device_copy(backend, weights.dt_bias);
  d.norm_ = device_copy(backend, weights.norm);
  backend.synchronize();  // uploads may be asynchronous; the host weights may go once build returns
  return d;
}

size_t DeltaNetLayer::weight_bytes() const noexcept {
  return qkv_.bytes_per_matrix() + z_.bytes_per_matrix() + a_.bytes_per_matrix() + b_.bytes_per_matrix() +
         out_.bytes_per_matrix() + conv_.bytes() + a_log_.bytes() + dt_bias_.bytes() + norm_.bytes();
}

void DeltaNetLayer::check_pool(const StatePool& pool) const {
  const RecurrentStateShape& r = pool.shape().recurrent;
  if (state_layer_ >= r.layers || r.bytes != config_.state_bytes()) {
    throw Error(Status::invalid_argument, "deltanet layer (state " + std::to_string(state_layer_) + ", " +
                                              std::to_string(config_.state_bytes()) + " bytes per sequence) cannot use a pool of " +
                                              std::to_string(r.layers) + " recurrent layers of " + std::to_string(r.bytes) + " bytes");
  }
}

DevicePtr DeltaNetLayer::forward(const LayerBatch& batch, uint64_t stream) {
  const SequenceBatch* state = batch.state;
  if (!state || state->rows() != batch.m)
    throw Error(Status::invalid_argument, "deltanet layer: the batch carries no state of its rows (a SequenceBatch)");
  result_.ensure(*backend_, size_t{batch.m} * config_.hidden_size * kBf16);
  forward_into(*state, batch.x, result_.ptr(), stream);
  return result_.ptr();
}

void DeltaNetLayer::forward_into(const SequenceBatch& batch, DevicePtr x, DevicePtr out, uint64_t stream) {
  check_pool(batch.pool());
  Backend& b = *backend_;
  const DeltaNetConfig& c = config_;
  const uint32_t m = batch.rows(), runs = static_cast<uint32_t>(batch.runs().size());
  mixed_.ensure(b, size_t{m} * c.conv_channels() * kBf16);
  qkv_out_.ensure(b, size_t{m} * c.conv_channels() * kBf16);
  z_out_.ensure(b, size_t{m} * c.value_width() * kBf16);
  a_out_.ensure(b, size_t{m} * c.v_heads * kBf16);
  b_out_.ensure(b, size_t{m} * c.v_heads * kBf16);
  core_.ensure(b, size_t{m} * c.value_width() * kBf16);
  const ProjectionSet& set = kernels_.projections;
  run_projection(b, set, qkv_, 0, x, mixed_.ptr(), m, scratch_, stream);
  run_projection(b, set, z_, 0, x, z_out_.ptr(), m, scratch_, stream);
  run_projection(b, kernels_.ab, a_, 0, x, a_out_.ptr(), m, scratch_, stream);
  run_projection(b, kernels_.ab, b_, 0, x, b_out_.ptr(), m, scratch_, stream);
  const DevicePtr slots = batch.pool().recurrent_slots(state_layer_);
  const auto stride = static_cast<uint32_t>(c.state_floats());
  b.launch(kernels_.conv, launch_shape({runs, 1, 1}, kBlock, stream), mixed_.ptr(), conv_.ptr(), slots, batch.recurrent_runs(),
           qkv_out_.ptr(), runs, c.conv_channels(), c.conv_kernel, stride);
  // The decode runs (leading) token by token, as successive decode steps; the others chunked.
  const DevicePtr matrices = slots.offset(c.conv_state_floats() * sizeof(float));
  const auto rule = [&](KernelHandle kernel, uint32_t first, uint32_t count) {
    if (count == 0) return;
    b.launch(kernel, launch_shape({count, c.v_heads, 1}, kBlock, stream), qkv_out_.ptr(), a_out_.ptr(), b_out_.ptr(),
             a_log_.ptr(), dt_bias_.ptr(), matrices, batch.recurrent_runs().offset(size_t{first} * 3 * sizeof(int32_t)),
             core_.ptr(), count, c.k_heads, c.v_heads, c.k_dim, c.v_dim, stride);
  };
  rule(kernels_.decode, 0, batch.decode_runs());
  rule(kernels_.prefill, batch.decode_runs(), runs - batch.decode_runs());
  const uint32_t rows = m * c.v_heads;
  b.launch(kernels_.gated_norm, launch_shape({rows, 1, 1}, kBlock, stream), core_.ptr(), z_out_.ptr(), norm_.ptr(), core_.ptr(),
           rows, c.v_dim, c.rms_norm_eps);
  run_projection(b, set, out_, 0, core_.ptr(), out, m, scratch_, stream);
}

std::vector<PlanStep> DeltaNetLayer::plan(uint32_t m) const {
  Backend& b = *backend_;
  const DeltaNetConfig& c = config_;
  const ProjectionSet& set = kernels_.projections;
  std::vector<PlanStep> steps;
  steps.push_back(describe_set_projection(b, set, "deltanet.qkv", m, c.conv_channels(), c.hidden_size));
  steps.push_back(describe_set_projection(b, set, "deltanet.z", m, c.value_width(), c.hidden_size));
  steps.push_back(describe_set_projection(b, kernels_.ab, "deltanet.a", m, c.v_heads, c.hidden_size));
  steps.push_back(describe_set_projection(b, kernels_.ab, "deltanet.b", m, c.v_heads, c.hidden_size));
  const auto step = [&](std::string name, KernelHandle k, std::string why, std::array<uint32_t, 3> grid) {
    steps.push_back(PlanStep{std::move(name), b.kernel_name(k), std::move(why), grid});
  };
  step("deltanet.conv", kernels_.conv, "causal conv + SiLU, window in the sequence's slot", {1, 1, 1});
  step("deltanet.rule", m == 1 ? kernels_.decode : kernels_.prefill,
       "gated delta rule (decode batches: delta_rule_recurrent over every sequence)", {1, c.v_heads, 1});
  step("deltanet.gated_norm", kernels_.gated_norm, "RMSNorm per value head, gated by silu(z)", {m * c.v_heads, 1, 1});
  steps.push_back(describe_set_projection(b, set, "deltanet.out", m, c.hidden_size, c.value_width()));
  return steps;
}

}  // namespace metrale::layers
