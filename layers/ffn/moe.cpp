// SPDX-License-Identifier: MIT OR Apache-2.0
#include "ffn/moe.hpp"

#include "core/device_buffer.hpp"
#include "core/launch_shape.hpp"
#include "core/lookup_notes.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/levers.hpp>
#include <metrale/status.hpp>

#include <algorithm>
#include <cmath>
#include <tuple>

namespace metrale::layers {

namespace {

constexpr std::string_view kGroupedDecodeLever = "METRALE_FP8_MOE_GROUPED_DECODE";
using catalogue::signature;
constexpr auto kRouterSig = signature("moe", "router_gemm");
constexpr auto kTopkSig = signature("moe", "topk_softmax");
constexpr auto kGatherSig = signature("moe", "moe_gather");
constexpr auto kCombineSig = signature("moe", "moe_combine");
constexpr auto kAlignSig = signature("moe", "moe_align");
// The cross-row grouped decode serves a few tokens; above this the grouped GEMM does.
constexpr uint32_t kGroupedDecodeMaxRows = 8;

// METRALE_FP8_MOE_GROUPED_DECODE=1 is an explicit request: refuse when it cannot be honoured.
// `align` is the moe/moe_align lookup's reason when it missed.
void check_grouped_decode(Backend& backend, const MoeKernels& k, GroupedDecodeRequest want, const std::string& align) {
  if (want != GroupedDecodeRequest::require) return;
  const std::string lever = lever_note(kGroupedDecodeLever);
  if (k.experts.family() != KernelFamily::fp8) {
    throw Refusal(lever + " asks for the cross-row grouped FP8 MoE decode, but the experts run as " +
                  std::string(family_info(k.experts.family()).module) + ", not FP8");
  }
  const std::string gemv = "fp8/fp8_grouped_gemv";
  for (auto [handle, name, reason] : {std::tuple{k.experts.kernels().grouped_gemv, gemv, k.experts.kernels().why_absent(gemv)},
                                      std::tuple{k.align, std::string("moe/moe_align"), align}}) {
    if (handle) continue;
    throw Refusal(lever + " asks for the cross-row grouped FP8 MoE decode, but backend '" + backend.name() + "' lacks " +
                  name + ": " + reason);
  }
}

}  // namespace

GroupedDecodeRequest grouped_decode_request() {
  const auto value = lever_choice(kGroupedDecodeLever);
  if (!value) return GroupedDecodeRequest::try_it;
  return *value == "1" ? GroupedDecodeRequest::require : GroupedDecodeRequest::off;
}

MoeKernels MoeLayer::resolve(Backend& backend, const ModelConfig& c, const MoeBuildOptions& options) {
  return resolve(backend, c, options, kDefaultWeightFormat, false, {});
}

MoeKernels MoeLayer::resolve(Backend& backend, const ModelConfig& c, const MoeBuildOptions& options, WeightFormat format,
                             bool act_order, const ActivationRequest& activations) {
  c.validate();
  if (c.ffn_kind() != FfnKind::moe) throw Error(Status::invalid_argument, c.source + ": not a MoE config (num_experts = 0)");
  const GroupedDecodeRequest decode = grouped_decode_request();
  MoeKernels k;
  k.router_gemm = backend.lookup("moe", "router_gemm", plain_request(LookupKind::require, kRouterSig));
  k.topk_softmax = backend.lookup("moe", "topk_softmax", plain_request(LookupKind::require, kTopkSig));
  k.gather = backend.lookup("moe", "moe_gather", plain_request(LookupKind::require, kGatherSig));
  ProjectionSetRequest experts;
  experts.name = "ffn.experts";
  experts.format = format;
  experts.act_order = act_order;
  experts.grouped = options.use_grouped_kernel;
  experts.grouped_decode = options.use_grouped_kernel && decode != GroupedDecodeRequest::off && format == WeightFormat::fp8;
  experts.shapes = {ProjectionShape{"ffn.experts.gate_up", gate_up_rows(c.moe_intermediate_size), c.hidden_size},
                    ProjectionShape{"ffn.experts.down", c.hidden_size, c.moe_intermediate_size}};
  experts.model_type = c.model_type;
  experts.activations = activations;
  k.experts = resolve_projection_set(backend, experts);
  k.act = resolve_act(backend, c.activation, std::source_location::current());
  k.combine = backend.lookup("moe", "moe_combine", plain_request(LookupKind::require, kCombineSig));
  std::string align_reason = "not provided";  // no lookup without the grouped kernels
  if (k.grouped()) {
    Backend::Resolution align = backend.resolve("moe", "moe_align", plain_request(LookupKind::try_lookup, kAlignSig));
    k.align = align.handle;
    align_reason = std::move(align.reason);
  }
  check_grouped_decode(backend, k, decode, align_reason);
  return k;
}

MoeLayer MoeLayer::build(Backend& backend, const ModelConfig& c, const MoeWeights& weights, const MoeBuildOptions& options,
                         const ActivationRequest& activations) {
  weights.validate(c);
  MoeLayer layer;
  layer.backend_ = &backend;
  layer.hidden_ = c.hidden_size;
  layer.intermediate_ = c.moe_intermediate_size;
  layer.experts_ = c.num_experts;
  layer.top_k_ = c.num_experts_per_tok;
  layer.renormalize_ = c.norm_topk_prob;
  layer.activation_ = c.activation;
  const bool act_order = !weights.gate_up.perm.empty() || !weights.down.perm.empty();
  layer.kernels_ = resolve(backend, c, options, weights.gate_up.format, act_order, activations);
  if (weights.shared_expert) {
    layer.shared_.emplace(DenseFfnLayer::build(backend, "ffn.shared_expert", *weights.shared_expert, c.activation,
                                               c.model_type, activations));
  }
  layer.router_ = device_copy(backend, weights.router);
  layer.gate_up_ = layer.kernels_.experts.upload(backend, weights.gate_up);
  layer.down_ = layer.kernels_.experts.upload(backend, weights.down);
  if (!weights.shared_expert_gate.empty()) {
    layer.shared_gated_ = true;
    layer.shared_gate_ = device_copy(backend, weights.shared_expert_gate);
  }
  layer.counts_.assign(c.num_experts, 0);
  backend.synchronize();
  return layer;
}

void MoeLayer::launch_experts(DevicePtr x_grouped, uint32_t total, uint32_t m, uint64_t stream) {
  Backend& b = *backend_;
  const ProjectionSet& set = kernels_.experts;
  const uint32_t n_gu = 2 * intermediate_;
  if (set.kernels().grouped_gemv && kernels_.device_routing() && m <= kGroupedDecodeMaxRows) {
    // Cross-row grouped decode: one launch per projection over the experts that received rows.
    const uint32_t slots = std::min(total, experts_);
    launch_family_grouped_decode(b, set.kernels(), gate_up_, x_grouped, offsets_.ptr(), active_.ptr(), gate_up_out_.ptr(), slots, stream);
    launch_act(b, kernels_.act, gate_up_out_.ptr(), act_out_.ptr(), total, intermediate_, stream);
    launch_family_grouped_decode(b, set.kernels(), down_, act_out_.ptr(), offsets_.ptr(), active_.ptr(), expert_out_.ptr(), slots, stream);
    return;
  }
  if (kernels_.grouped()) {
    run_grouped_projection(b, set, gate_up_, x_grouped, offsets_.ptr(), gate_up_out_.ptr(), total, scratch_, stream);
    launch_act(b, kernels_.act, gate_up_out_.ptr(), act_out_.ptr(), total, intermediate_, stream);
    run_grouped_projection(b, set, down_, act_out_.ptr(), offsets_.ptr(), expert_out_.ptr(), total, scratch_, stream);
    return;
  }
  for (uint32_t e = 0; e < experts_; ++e) {
    if (counts_[e] == 0) continue;
    const size_t first = static_cast<size_t>(host_offsets_[e]);
    run_projection(b, set, gate_up_, e, x_grouped.offset(first * hidden_ * kBf16), gate_up_out_.at(first * n_gu * kBf16),
                   counts_[e], scratch_, stream);
  }
  launch_act(b, kernels_.act, gate_up_out_.ptr(), act_out_.ptr(), total, intermediate_, stream);
  for (uint32_t e = 0; e < experts_; ++e) {
    if (counts_[e] == 0) continue;
    const size_t first = static_cast<size_t>(host_offsets_[e]);
    run_projection(b, set, down_, e, act_out_.at(first * intermediate_ * kBf16), expert_out_.at(first * hidden_ * kBf16),
                   counts_[e], scratch_, stream);
  }
}

// Groups the (token, choice) pairs by expert on the host: the kernels take offsets and slots.
void MoeLayer::route_on_host(uint32_t m, uint64_t stream) {
  const uint32_t E = experts_, K = top_k_, T = m * K;
  const uint32_t slots_per_token = K + (shared_ ? 1 : 0);
  host_ids_ = ids_.download<int32_t>(T, 0, stream);
  counts_.assign(E, 0);
  for (uint32_t i = 0; i < T; ++i) {
    const int32_t e = host_ids_[i];
    if (e < 0 || static_cast<uint32_t>(e) >= E) {
      throw Error(Status::internal, "moe/topk_softmax returned expert id " + std::to_string(e) + " for token " +
                                        std::to_string(i / K) + " (num_experts = " + std::to_string(E) + ")");
    }
    ++counts_[static_cast<uint32_t>(e)];
  }
  host_offsets_.assign(E + 1, 0);
  for (uint32_t e = 0; e < E; ++e) host_offsets_[e + 1] = host_offsets_[e] + static_cast<int32_t>(counts_[e]);
  std::vector<int32_t> cursor(host_offsets_.begin(), host_offsets_.end() - 1);
  host_rows_.assign(T, 0);
  host_slots_.assign(size_t{m} * slots_per_token, 0);
  for (uint32_t r = 0; r < m; ++r) {
    for (uint32_t j = 0; j < K; ++j) {
      const int32_t slot = cursor[static_cast<uint32_t>(host_ids_[size_t{r} * K + j])]++;
      host_rows_[static_cast<size_t>(slot)] = static_cast<int32_t>(r);
      host_slots_[size_t{r} * slots_per_token + j] = slot;
    }
    if (shared_) host_slots_[size_t{r} * slots_per_token + K] = static_cast<int32_t>(T + r);
  }
  rows_.upload(std::span<const int32_t>(host_rows_), 0, stream);
  offsets_.upload(std::span<const int32_t>(host_offsets_), 0, stream);
  slots_.upload(std::span<const int32_t>(host_slots_), 0, stream);
  counts_stale_ = false;
}

// moe/moe_align: offsets, rows, slots and the combine weights (the shared expert's gate
// included) computed where the ids are, so nothing of the routing crosses to the host.
void MoeLayer::route_on_device(DevicePtr x, uint32_t m, uint64_t stream) {
  Backend& b = *backend_;
  uint32_t shared_mode = 0;
  if (shared_) {
    shared_mode = shared_gated_ ? 2 : 1;
    if (shared_gated_) {
      gate_logits_.ensure(b, size_t{m} * 4);
      b.launch(kernels_.router_gemm, launch_shape({1, m, 1}, 128, stream), x, shared_gate_.ptr(), gate_logits_.ptr(), m,
               uint32_t{1}, hidden_);
    }
  }
  const DevicePtr logits = shared_gated_ ? gate_logits_.ptr() : weights_.ptr();  // read only when gated
  b.launch(kernels_.align, launch_shape({1, 1, 1}, 128, stream), ids_.ptr(), weights_.ptr(), logits, offsets_.ptr(), rows_.ptr(),
           slots_.ptr(), combine_weights_.ptr(), active_.ptr(), m, experts_, top_k_, shared_mode);
  counts_stale_ = true;
}

// The combine weights of host routing: the k routing weights, then the shared expert's.
DevicePtr MoeLayer::host_combine_weights(DevicePtr x, uint32_t m, uint64_t stream) {
  if (!shared_) return weights_.ptr();
  Backend& b = *backend_;
  const uint32_t K = top_k_, slots_per_token = K + 1;
  host_weights_ = weights_.download<float>(size_t{m} * K, 0, stream);
  if (shared_gated_) {
    gate_logits_.ensure(b, size_t{m} * 4);
    b.launch(kernels_.router_gemm, launch_shape({1, m, 1}, 128, stream), x, shared_gate_.ptr(), gate_logits_.ptr(), m, uint32_t{1},
             hidden_);
    host_gate_ = gate_logits_.download<float>(m, 0, stream);
  }
  host_combine_.assign(size_t{m} * slots_per_token, 0.0f);
  for (uint32_t r = 0; r < m; ++r) {
    for (uint32_t j = 0; j < K; ++j) host_combine_[size_t{r} * slots_per_token + j] = host_weights_[size_t{r} * K + j];
    host_combine_[size_t{r} * slots_per_token + K] =
        shared_gated_ ? static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(host_gate_[r])))) : 1.0f;
  }
  combine_weights_.upload(std::span<const float>(host_combine_), 0, stream);
  return combine_weights_.ptr();
}

void MoeLayer::forward_into(DevicePtr x, uint32_t m, DevicePtr out, uint64_t stream) {
  if (m == 0) throw Error(Status::invalid_argument, "ffn (MoE): forward needs m >= 1 rows");
  Backend& b = *backend_;
  const uint32_t E = experts_, K = top_k_, T = m * K;
  const bool shared = shared_.has_value();
  const uint32_t slots_per_token = K + (shared ? 1 : 0);
  logits_.ensure(b, size_t{m} * E * 4);
  ids_.ensure(b, size_t{T} * 4);
  weights_.ensure(b, size_t{T} * 4);
  rows_.ensure(b, size_t{T} * 4);
  offsets_.ensure(b, size_t{E + 1} * 4);
  active_.ensure(b, size_t{E + 1} * 4);
  slots_.ensure(b, size_t{m} * slots_per_token * 4);
  combine_weights_.ensure(b, size_t{m} * slots_per_token * 4);
  x_grouped_.ensure(b, size_t{T} * hidden_ * kBf16);
  gate_up_out_.ensure(b, size_t{T} * 2 * intermediate_ * kBf16);
  act_out_.ensure(b, size_t{T} * intermediate_ * kBf16);
  expert_out_.ensure(b, size_t{T + (shared ? m : 0)} * hidden_ * kBf16);
  b.launch(kernels_.router_gemm, launch_shape({ceil_div(E, 64), m, 1}, 128, stream), x, router_.ptr(), logits_.ptr(), m, E, hidden_);
  b.launch(kernels_.topk_softmax, launch_shape({m, 1, 1}, 128, stream), logits_.ptr(), ids_.ptr(), weights_.ptr(), m, E, K,
           uint32_t{renormalize_ ? 1u : 0u});
  DevicePtr combine_weights = combine_weights_.ptr();
  if (kernels_.device_routing()) {
    route_on_device(x, m, stream);
  } else {
    route_on_host(m, stream);
    combine_weights = host_combine_weights(x, m, stream);
  }
  b.launch(kernels_.gather, launch_shape({T, 1, 1}, 128, stream), x, rows_.ptr(), x_grouped_.ptr(), T, hidden_);
  launch_experts(x_grouped_.ptr(), T, m, stream);
  // The shared expert's rows sit after the routed rows.
  if (shared) shared_->forward_into(x, m, expert_out_.at(size_t{T} * hidden_ * kBf16), stream);
  b.launch(kernels_.combine, launch_shape({m, 1, 1}, 128, stream), expert_out_.ptr(), slots_.ptr(), combine_weights, out, m,
           slots_per_token, hidden_);
}

DevicePtr MoeLayer::forward(DevicePtr x, uint32_t m, uint64_t stream) {
  out_.ensure(*backend_, size_t{m} * hidden_ * kBf16);
  forward_into(x, m, out_.ptr(), stream);
  return out_.ptr();
}

DevicePtr MoeLayer::forward_decode(DevicePtr x, uint64_t stream) { return forward(x, 1, stream); }

DevicePtr MoeLayer::forward_batched(DevicePtr x, uint32_t m, uint64_t stream) {
  if (m == 0 || m > 8) throw Error(Status::invalid_argument, "ffn (MoE): batched decode takes 1..8 rows, got " + std::to_string(m));
  return forward(x, m, stream);
}

DevicePtr MoeLayer::forward_prefill(DevicePtr x, uint32_t m, uint64_t stream) { return forward(x, m, stream); }

const std::vector<uint32_t>& MoeLayer::last_expert_rows() {
  if (counts_stale_) {
    const auto offsets = offsets_.download<int32_t>(size_t{experts_} + 1);
    for (uint32_t e = 0; e < experts_; ++e) counts_[e] = static_cast<uint32_t>(offsets[e + 1] - offsets[e]);
    counts_stale_ = false;
  }
  return counts_;
}

std::vector<PlanStep> MoeLayer::plan(uint32_t m) const {
  Backend& b = *backend_;
  const uint32_t T = m * top_k_;
  const ProjectionSet& set = kernels_.experts;
  std::vector<PlanStep> steps;
  steps.push_back({"ffn.router", b.kernel_name(kernels_.router_gemm), "f32 logits [m, E]", {ceil_div(experts_, 64), m, 1}});
  steps.push_back({"ffn.topk", b.kernel_name(kernels_.topk_softmax),
                   "top-" + std::to_string(top_k_) + (renormalize_ ? ", renormalised" : ""), {m, 1, 1}});
  if (kernels_.device_routing()) {
    steps.push_back({"ffn.routing", b.kernel_name(kernels_.align), "on the device: offsets, rows, slots", {1, 1, 1}});
  } else {
    steps.push_back({"ffn.routing", "(host)", kernels_.grouped() ? "on the host: no moe/moe_align" : "on the host: per-expert launches need the counts", {0, 0, 0}});
  }
  steps.push_back({"ffn.gather", b.kernel_name(kernels_.gather), "T = m*k = " + std::to_string(T) + " rows", {T, 1, 1}});
  const bool decode = set.kernels().grouped_gemv && kernels_.device_routing() && m <= kGroupedDecodeMaxRows;
  for (const auto& [step, n, k] : {std::tuple{std::string("ffn.experts.gate_up"), 2 * intermediate_, hidden_},
                                   std::tuple{std::string("ffn.experts.down"), hidden_, intermediate_}}) {
    if (decode) {
      steps.push_back({step, b.kernel_name(set.kernels().grouped_gemv), "cross-row grouped decode over the active experts",
                       {ceil_div(n, 64), std::min(T, experts_), 1}});
    } else if (kernels_.grouped()) {
      steps.push_back({step, b.kernel_name(set.kernels().grouped), "grouped, all experts in one launch", {ceil_div(n, 128), experts_, 1}});
    } else {
      // Rows per expert are known only after routing; show an expert with the average share.
      PlanStep s = describe_set_projection(b, set, step, std::max<uint32_t>(1, T / experts_), n, k);
      s.why = "no grouped kernel: per-expert launches; e.g. " + s.why;
      steps.push_back(s);
    }
    if (step == "ffn.experts.gate_up") {
      steps.push_back({"ffn.experts.act", b.kernel_name(kernels_.act), activation_name(activation_), {ceil_div(intermediate_, 1024), T, 1}});
    }
  }
  if (shared_) {
    for (auto& s : shared_->plan(m)) steps.push_back(std::move(s));
    if (shared_gated_) steps.push_back({"ffn.shared_expert_gate", b.kernel_name(kernels_.router_gemm), "sigmoid gate, E = 1", {1, m, 1}});
  }
  steps.push_back({"ffn.combine", b.kernel_name(kernels_.combine),
                   std::to_string(top_k_ + (shared_ ? 1 : 0)) + " weighted rows per token", {m, 1, 1}});
  return steps;
}

size_t MoeLayer::weight_bytes() const noexcept {
  size_t total = router_.bytes() + gate_up_.bytes_per_matrix() * experts_ + down_.bytes_per_matrix() * experts_;
  if (shared_) total += shared_->weight_bytes() + (shared_gated_ ? shared_gate_.bytes() : 0);
  return total;
}

size_t MoeLayer::last_weight_bytes() {
  size_t active = 0;
  for (uint32_t c : last_expert_rows()) active += c > 0 ? 1 : 0;
  size_t total = router_.bytes() + active * (gate_up_.bytes_per_matrix() + down_.bytes_per_matrix());
  if (shared_) total += shared_->weight_bytes() + (shared_gated_ ? shared_gate_.bytes() : 0);
  return total;
}

}  // namespace metrale::layers
