// SPDX-License-Identifier: MIT OR Apache-2.0
#include "moe.hpp"

#include <metrale/status.hpp>

#include <array>
#include <cmath>

namespace metrale::layers {

namespace {

constexpr size_t kBf16 = 2;
using P = metrale_param_type;
constexpr P kPtr = METRALE_PARAM_PTR;
constexpr P kU32 = METRALE_PARAM_U32;
constexpr std::array<P, 6> kRouterSig{kPtr, kPtr, kPtr, kU32, kU32, kU32};
constexpr std::array<P, 7> kTopkSig{kPtr, kPtr, kPtr, kU32, kU32, kU32, kU32};
constexpr std::array<P, 5> kGatherSig{kPtr, kPtr, kPtr, kU32, kU32};
constexpr std::array<P, 8> kGroupedSig{kPtr, kPtr, kPtr, kPtr, kPtr, kU32, kU32, kU32};
constexpr std::array<P, 7> kCombineSig{kPtr, kPtr, kPtr, kPtr, kU32, kU32, kU32};

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

Backend::LookupRequest request(LookupKind kind, std::span<const P> signature) {
  return Backend::LookupRequest{.kind = kind, .expected = signature, .lever = {}, .refuse_because = {}};
}

LaunchShape shape(std::array<uint32_t, 3> grid, uint32_t block, uint64_t stream) {
  LaunchShape s;
  s.grid = grid;
  s.block = {block, 1, 1};
  s.stream = stream;
  return s;
}

}  // namespace

MoeKernels MoeLayer::resolve(Backend& backend, const ModelConfig& c, const MoeBuildOptions& options) {
  c.validate();
  if (c.ffn_kind() != FfnKind::moe) throw Error(Status::invalid_argument, c.source + ": not a MoE config (num_experts = 0)");
  MoeKernels k;
  k.router_gemm = backend.lookup("moe", "router_gemm", request(LookupKind::require, kRouterSig));
  k.topk_softmax = backend.lookup("moe", "topk_softmax", request(LookupKind::require, kTopkSig));
  k.gather = backend.lookup("moe", "moe_gather", request(LookupKind::require, kGatherSig));
  if (options.use_grouped_kernel) {
    k.grouped = backend.lookup("moe", "w4a16_grouped_gemm", request(LookupKind::try_lookup, kGroupedSig));
  }
  if (!k.grouped) {
    // Per-expert fallback: each expert's rows go through the dense projection chain.
    const std::array<ProjectionShape, 2> shapes{
        ProjectionShape{"ffn.experts.gate_up", gate_up_rows(c.moe_intermediate_size), c.hidden_size},
        ProjectionShape{"ffn.experts.down", c.hidden_size, c.moe_intermediate_size}};
    k.per_expert = resolve_projection_kernels(backend, shapes, c.model_type);
  }
  k.act = resolve_act(backend, c.activation, std::source_location::current());
  k.combine = backend.lookup("moe", "moe_combine", request(LookupKind::require, kCombineSig));
  k.repack = resolve_w4a16_repack(backend);
  const std::string layout = weight_layout_of(backend, k.repack);
  require_weight_layout(backend, k.grouped, layout);
  require_weight_layout(backend, k.per_expert, layout);
  return k;
}

MoeLayer MoeLayer::build(Backend& backend, const ModelConfig& c, const MoeWeights& weights, const MoeBuildOptions& options) {
  weights.validate(c);
  MoeLayer layer;
  layer.backend_ = &backend;
  layer.hidden_ = c.hidden_size;
  layer.intermediate_ = c.moe_intermediate_size;
  layer.experts_ = c.num_experts;
  layer.top_k_ = c.num_experts_per_tok;
  layer.renormalize_ = c.norm_topk_prob;
  layer.activation_ = c.activation;
  layer.kernels_ = resolve(backend, c, options);
  if (weights.shared_expert) {
    layer.shared_.emplace(DenseFfnLayer::build(backend, "ffn.shared_expert", *weights.shared_expert, c.activation,
                                               c.model_type));
  }
  layer.router_ = DeviceBuffer(backend, weights.router.size() * sizeof(float));
  layer.router_.upload(std::span<const float>(weights.router));
  layer.gate_up_ = DeviceW4a16::upload(backend, weights.gate_up, layer.kernels_.repack);
  layer.down_ = DeviceW4a16::upload(backend, weights.down, layer.kernels_.repack);
  if (!weights.shared_expert_gate.empty()) {
    layer.shared_gated_ = true;
    layer.shared_gate_ = DeviceBuffer(backend, weights.shared_expert_gate.size() * sizeof(float));
    layer.shared_gate_.upload(std::span<const float>(weights.shared_expert_gate));
  }
  layer.counts_.assign(c.num_experts, 0);
  backend.synchronize();
  return layer;
}

void MoeLayer::launch_experts(DevicePtr x_grouped, uint32_t total, uint64_t stream) {
  Backend& b = *backend_;
  const uint32_t n_gu = 2 * intermediate_;
  if (kernels_.grouped) {
    b.launch(kernels_.grouped, shape({ceil_div(n_gu, 128), experts_, 1}, 128, stream), x_grouped, gate_up_.qweight.ptr(),
             gate_up_.scales.ptr(), offsets_.ptr(), gate_up_out_.ptr(), n_gu, hidden_, experts_);
    launch_act(b, kernels_.act, gate_up_out_.ptr(), act_out_.ptr(), total, intermediate_, stream);
    b.launch(kernels_.grouped, shape({ceil_div(hidden_, 128), experts_, 1}, 128, stream), act_out_.ptr(),
             down_.qweight.ptr(), down_.scales.ptr(), offsets_.ptr(), expert_out_.ptr(), hidden_, intermediate_, experts_);
    return;
  }
  for (uint32_t e = 0; e < experts_; ++e) {
    const uint32_t rows = counts_[e];
    if (rows == 0) continue;
    const size_t first = static_cast<size_t>(host_offsets_[e]);
    launch_projection(b, kernels_.per_expert, gate_up_, e, x_grouped.offset(first * hidden_ * kBf16),
                      gate_up_out_.at(first * n_gu * kBf16), rows, stream);
  }
  launch_act(b, kernels_.act, gate_up_out_.ptr(), act_out_.ptr(), total, intermediate_, stream);
  for (uint32_t e = 0; e < experts_; ++e) {
    const uint32_t rows = counts_[e];
    if (rows == 0) continue;
    const size_t first = static_cast<size_t>(host_offsets_[e]);
    launch_projection(b, kernels_.per_expert, down_, e, act_out_.at(first * intermediate_ * kBf16),
                      expert_out_.at(first * hidden_ * kBf16), rows, stream);
  }
}

void MoeLayer::forward_into(DevicePtr x, uint32_t m, DevicePtr out, uint64_t stream) {
  if (m == 0) throw Error(Status::invalid_argument, "ffn (MoE): forward needs m >= 1 rows");
  Backend& b = *backend_;
  const uint32_t E = experts_;
  const uint32_t K = top_k_;
  const uint32_t T = m * K;
  const bool shared = shared_.has_value();
  const uint32_t slots_per_token = K + (shared ? 1 : 0);

  logits_.ensure(b, size_t{m} * E * 4);
  ids_.ensure(b, size_t{T} * 4);
  weights_.ensure(b, size_t{T} * 4);
  b.launch(kernels_.router_gemm, shape({ceil_div(E, 64), m, 1}, 128, stream), x, router_.ptr(), logits_.ptr(), m, E, hidden_);
  b.launch(kernels_.topk_softmax, shape({m, 1, 1}, 128, stream), logits_.ptr(), ids_.ptr(), weights_.ptr(), m, E, K,
           uint32_t{renormalize_ ? 1u : 0u});

  // Group the (token, choice) pairs by expert on the host: the kernels take offsets and slots.
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
    if (shared) host_slots_[size_t{r} * slots_per_token + K] = static_cast<int32_t>(T + r);
  }

  rows_.ensure(b, size_t{T} * 4);
  offsets_.ensure(b, size_t{E + 1} * 4);
  slots_.ensure(b, host_slots_.size() * 4);
  rows_.upload(std::span<const int32_t>(host_rows_), 0, stream);
  offsets_.upload(std::span<const int32_t>(host_offsets_), 0, stream);
  slots_.upload(std::span<const int32_t>(host_slots_), 0, stream);

  x_grouped_.ensure(b, size_t{T} * hidden_ * kBf16);
  gate_up_out_.ensure(b, size_t{T} * 2 * intermediate_ * kBf16);
  act_out_.ensure(b, size_t{T} * intermediate_ * kBf16);
  expert_out_.ensure(b, size_t{T + (shared ? m : 0)} * hidden_ * kBf16);
  b.launch(kernels_.gather, shape({T, 1, 1}, 128, stream), x, rows_.ptr(), x_grouped_.ptr(), T, hidden_);
  launch_experts(x_grouped_.ptr(), T, stream);

  DevicePtr combine_weights = weights_.ptr();
  if (shared) {
    // The shared expert's rows sit after the routed rows; its weight joins each token's k weights.
    shared_->forward_into(x, m, expert_out_.at(size_t{T} * hidden_ * kBf16), stream);
    host_weights_ = weights_.download<float>(T, 0, stream);
    if (shared_gated_) {
      gate_logits_.ensure(b, size_t{m} * 4);
      b.launch(kernels_.router_gemm, shape({1, m, 1}, 128, stream), x, shared_gate_.ptr(), gate_logits_.ptr(), m,
               uint32_t{1}, hidden_);
      host_gate_ = gate_logits_.download<float>(m, 0, stream);
    }
    host_combine_.assign(size_t{m} * slots_per_token, 0.0f);
    for (uint32_t r = 0; r < m; ++r) {
      for (uint32_t j = 0; j < K; ++j) host_combine_[size_t{r} * slots_per_token + j] = host_weights_[size_t{r} * K + j];
      host_combine_[size_t{r} * slots_per_token + K] =
          shared_gated_ ? static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(host_gate_[r])))) : 1.0f;
    }
    combine_weights_.ensure(b, host_combine_.size() * 4);
    combine_weights_.upload(std::span<const float>(host_combine_), 0, stream);
    combine_weights = combine_weights_.ptr();
  }
  b.launch(kernels_.combine, shape({m, 1, 1}, 128, stream), expert_out_.ptr(), slots_.ptr(), combine_weights, out, m,
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

std::vector<PlanStep> MoeLayer::plan(uint32_t m) const {
  Backend& b = *backend_;
  const uint32_t T = m * top_k_;
  std::vector<PlanStep> steps;
  steps.push_back({"ffn.router", b.kernel_name(kernels_.router_gemm), "f32 logits [m, E]", {ceil_div(experts_, 64), m, 1}});
  steps.push_back({"ffn.topk", b.kernel_name(kernels_.topk_softmax),
                   "top-" + std::to_string(top_k_) + (renormalize_ ? ", renormalised" : ""), {m, 1, 1}});
  steps.push_back({"ffn.gather", b.kernel_name(kernels_.gather), "T = m*k = " + std::to_string(T) + " rows", {T, 1, 1}});
  if (kernels_.grouped) {
    steps.push_back({"ffn.experts.gate_up", b.kernel_name(kernels_.grouped), "grouped, all experts in one launch",
                     {ceil_div(2 * intermediate_, 128), experts_, 1}});
  } else {
    // Rows per expert are known only after routing; show the path an expert with the average
    // share (at least one row) would take.
    const uint32_t rows = std::max<uint32_t>(1, T / experts_);
    PlanStep s = describe_projection(b, kernels_.per_expert, "ffn.experts.gate_up", rows, 2 * intermediate_, hidden_);
    s.why = "no grouped kernel: per-expert launches; e.g. " + s.why;
    steps.push_back(s);
  }
  steps.push_back({"ffn.experts.act", b.kernel_name(kernels_.act), activation_name(activation_), {ceil_div(intermediate_, 1024), T, 1}});
  if (kernels_.grouped) {
    steps.push_back({"ffn.experts.down", b.kernel_name(kernels_.grouped), "grouped, all experts in one launch",
                     {ceil_div(hidden_, 128), experts_, 1}});
  } else {
    const uint32_t rows = std::max<uint32_t>(1, T / experts_);
    PlanStep s = describe_projection(b, kernels_.per_expert, "ffn.experts.down", rows, hidden_, intermediate_);
    s.why = "no grouped kernel: per-expert launches; e.g. " + s.why;
    steps.push_back(s);
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

size_t MoeLayer::last_weight_bytes() const noexcept {
  size_t active = 0;
  for (uint32_t c : counts_) active += c > 0 ? 1 : 0;
  size_t total = router_.bytes() + active * (gate_up_.bytes_per_matrix() + down_.bytes_per_matrix());
  if (shared_) total += shared_->weight_bytes() + (shared_gated_ ? shared_gate_.bytes() : 0);
  return total;
}

}  // namespace metrale::layers
