// SPDX-License-Identifier: MIT OR Apache-2.0
#include "attention/attention.hpp"

#include "core/device_buffer.hpp"
#include "core/launch_shape.hpp"
#include "core/lookup_notes.hpp"
#include "core/levers.hpp"
#include "linear/bias.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/levers.hpp>
#include <metrale/status.hpp>

#include <array>

namespace metrale::layers {

namespace {

constexpr uint32_t kBlock = 128;
constexpr std::string_view kFusedLever = "METRALE_QK_NORM_ROPE";
using catalogue::signature;
constexpr auto kRmsNormSig = signature("norm", "rms_norm");
constexpr auto kZeroCentredSig = signature("norm", "rms_norm_zero_centred");
constexpr auto kOutputGateSig = signature("attn", "output_gate");
constexpr auto kRopeSig = signature("rope", "rope");
constexpr auto kQkNormRopeSig = signature("rope", "qk_norm_rope");
constexpr auto kAppendSig = signature("attn", "kv_append");
constexpr auto kDecodeSig = signature("attn", "attn_decode");
constexpr auto kCombineSig = signature("attn", "attn_decode_combine");
constexpr auto kPrefillSig = signature("attn", "attn_prefill");
// attn_prefill's rows per block (docs/kernels.md).
constexpr uint32_t kPrefillRows = 64;

// Partial rotary as a permutation of each head's dims (attention.hpp): position p of the stored
// head holds original dim order[p]; rotated pairs (i, i + r/2) land on (i, i + d/2).
std::vector<uint32_t> rotary_order(uint32_t head_dim, uint32_t rotary_dim) {
  const uint32_t half_d = head_dim / 2, half_r = rotary_dim / 2, pass = half_d - half_r;
  std::vector<uint32_t> order(head_dim);
  for (uint32_t p = 0; p < half_d; ++p) {
    order[p] = p < half_r ? p : rotary_dim + (p - half_r);
    order[half_d + p] = p < half_r ? half_r + p : rotary_dim + pass + (p - half_r);
  }
  return order;
}

// `m`'s rows, head by head, in `order` (one head's order, repeated).
QuantMatrix permute_heads(const QuantMatrix& m, const std::vector<uint32_t>& order) {
  std::vector<uint32_t> rows(m.n);
  const uint32_t d = static_cast<uint32_t>(order.size());
  for (uint32_t r = 0; r < m.n; ++r) rows[r] = (r / d) * d + order[r % d];
  return select_rows(m.name, m, rows);
}

std::vector<uint16_t> permute_vector(const std::vector<uint16_t>& v, const std::vector<uint32_t>& order) {
  if (v.empty()) return v;
  std::vector<uint16_t> out(order.size());
  for (size_t p = 0; p < order.size(); ++p) out[p] = v[order[p]];
  return out;
}

}  // namespace

FusedQkNormRope fused_qk_norm_rope_request() {
  register_levers();
  const auto value = lever_choice(kFusedLever);
  if (!value) return FusedQkNormRope::try_it;
  return *value == "1" ? FusedQkNormRope::require : FusedQkNormRope::off;
}

AttentionKernels AttentionLayer::resolve(Backend& backend, const AttentionConfig& c, WeightFormat format, bool act_order,
                                         const ActivationRequest& activations) {
  ProjectionSetRequest request;
  request.name = "attn";
  request.format = format;
  request.act_order = act_order;
  request.shapes = {ProjectionShape{"attn.q", c.q_width(), c.hidden_size}, ProjectionShape{"attn.k", c.kv_width(), c.hidden_size},
                    ProjectionShape{"attn.v", c.kv_width(), c.hidden_size}, ProjectionShape{"attn.o", c.hidden_size, c.q_width()}};
  if (c.output_gate) request.shapes.push_back(ProjectionShape{"attn.gate", c.q_width(), c.hidden_size});
  request.model_type = c.model_type;
  request.activations = activations;
  AttentionKernels k;
  // The attn module first: the kernels a backend is likeliest to lack, named first when it does.
  k.kv_append = backend.lookup("attn", "kv_append", plain_request(LookupKind::require, kAppendSig));
  k.decode = backend.lookup("attn", "attn_decode", plain_request(LookupKind::require, kDecodeSig));
  k.decode_combine = backend.lookup("attn", "attn_decode_combine", plain_request(LookupKind::require, kCombineSig));
  k.prefill = backend.lookup("attn", "attn_prefill", plain_request(LookupKind::require, kPrefillSig));
  k.projections = resolve_projection_set(backend, request);
  if (c.qkv_bias || c.o_bias) k.bias_add = resolve_bias_add(backend);
  if (c.output_gate) k.output_gate = backend.lookup("attn", "output_gate", plain_request(LookupKind::require, kOutputGateSig));
  if (c.qk_norm && c.zero_centred_norm) {
    // No fused kernel computes the zero-centred norm: the separate kernels, each audited.
    k.rms_norm = backend.lookup("norm", "rms_norm_zero_centred", plain_request(LookupKind::require, kZeroCentredSig));
  } else if (c.qk_norm) {
    const FusedQkNormRope want = fused_qk_norm_rope_request();
    if (want != FusedQkNormRope::off) {
      Backend::LookupRequest fused{.kind = LookupKind::try_lookup, .expected = kQkNormRopeSig,
                                   .lever = lever_note(kFusedLever), .refuse_because = {}, .annotations = {}};
      if (want == FusedQkNormRope::require) {
        fused.refuse_because = lever_note(kFusedLever) + " asks for the fused q/k RMSNorm + RoPE kernel rope/qk_norm_rope";
      } else {
        fused.lever.clear();
      }
      k.qk_norm_rope = backend.lookup("rope", "qk_norm_rope", fused);
    }
    if (!k.qk_norm_rope) k.rms_norm = backend.lookup("norm", "rms_norm", plain_request(LookupKind::require, kRmsNormSig));
  }
  if (!k.qk_norm_rope) k.rope = backend.lookup("rope", "rope", plain_request(LookupKind::require, kRopeSig));
  return k;
}

AttentionLayer AttentionLayer::build(Backend& backend, const AttentionConfig& config, const AttentionWeights& weights,
                                     uint32_t layer, const ActivationRequest& activations) {
  weights.validate(config);
  AttentionLayer a;
  a.backend_ = &backend;
  a.config_ = config;
  a.layer_ = layer;
  a.kernels_ = resolve(backend, config, weights.format(), weights.act_order(), activations);
  const ProjectionSet& set = a.kernels_.projections;
  RopeParameters rope = rope_parameters(config.rope);
  a.rope_scaling_ = rope.attention_scaling;
  if (config.rope.rotary_dim != 0 && config.rope.rotary_dim < config.head_dim) {
    const std::vector<uint32_t> order = rotary_order(config.head_dim, config.rope.rotary_dim);
    a.q_ = set.upload(backend, permute_heads(weights.q, order));
    a.k_ = set.upload(backend, permute_heads(weights.k, order));
    a.q_norm_ = device_copy(backend, permute_vector(weights.q_norm, order));
    a.k_norm_ = device_copy(backend, permute_vector(weights.k_norm, order));
    rope.inv_freq.resize(config.head_dim / 2, 0.0f);  // the unrotated dims: frequency 0
  } else {
    a.q_ = set.upload(backend, weights.q);
    a.k_ = set.upload(backend, weights.k);
    a.q_norm_ = device_copy(backend, weights.q_norm);
    a.k_norm_ = device_copy(backend, weights.k_norm);
  }
  a.v_ = set.upload(backend, weights.v);
  a.o_ = set.upload(backend, weights.o);
  if (config.output_gate) a.gate_ = set.upload(backend, weights.gate);
  a.q_bias_ = device_copy(backend, weights.q_bias);
  a.k_bias_ = device_copy(backend, weights.k_bias);
  a.v_bias_ = device_copy(backend, weights.v_bias);
  a.o_bias_ = device_copy(backend, weights.o_bias);
  a.inv_freq_ = device_copy(backend, rope.inv_freq);
  backend.synchronize();  // uploads may be asynchronous; the host weights may go once build returns
  return a;
}

size_t AttentionLayer::weight_bytes() const noexcept {
  return q_.bytes_per_matrix() + k_.bytes_per_matrix() + v_.bytes_per_matrix() + o_.bytes_per_matrix() +
         (config_.output_gate ? gate_.bytes_per_matrix() : 0);
}

void AttentionLayer::check_cache(const StatePool& cache) const {
  const StatePoolShape& s = cache.shape();
  if (s.kv_heads != config_.kv_heads || s.head_dim != config_.head_dim || layer_ >= s.layers) {
    throw Error(Status::invalid_argument,
                "attention layer " + std::to_string(layer_) + " (" + std::to_string(config_.kv_heads) + " kv heads of " +
                    std::to_string(config_.head_dim) + ") cannot use a KV cache of " + std::to_string(s.layers) +
                    " layers, " + std::to_string(s.kv_heads) + " kv heads of " + std::to_string(s.head_dim));
  }
}

DevicePtr AttentionLayer::forward(const LayerBatch& batch, uint64_t stream) {
  const SequenceBatch* kv = batch.state;
  if (!kv) throw Error(Status::invalid_argument, "attention layer " + std::to_string(layer_) + ": the batch carries no KV cache state (a SequenceBatch)");
  if (kv->rows() != batch.m) {
    throw Error(Status::invalid_argument, "attention layer: " + std::to_string(batch.m) + " rows, but the batch's KV state has " +
                                              std::to_string(kv->rows()));
  }
  out_.ensure(*backend_, size_t{batch.m} * config_.hidden_size * kBf16);
  forward_into(*kv, batch.x, out_.ptr(), stream);
  return out_.ptr();
}

void AttentionLayer::forward_into(const SequenceBatch& kv, DevicePtr x, DevicePtr out, uint64_t stream) {
  check_cache(kv.pool());
  Backend& b = *backend_;
  const AttentionConfig& c = config_;
  const uint32_t m = kv.rows();
  q_out_.ensure(b, size_t{m} * c.q_width() * kBf16);
  k_out_.ensure(b, size_t{m} * c.kv_width() * kBf16);
  v_out_.ensure(b, size_t{m} * c.kv_width() * kBf16);
  attn_out_.ensure(b, size_t{m} * c.q_width() * kBf16);
  const ProjectionSet& set = kernels_.projections;
  run_projection(b, set, q_, 0, x, q_out_.ptr(), m, scratch_, stream);
  run_projection(b, set, k_, 0, x, k_out_.ptr(), m, scratch_, stream);
  run_projection(b, set, v_, 0, x, v_out_.ptr(), m, scratch_, stream);
  add_bias(*backend_, kernels_.bias_add, q_bias_, q_out_.ptr(), m, c.q_width(), stream);
  add_bias(*backend_, kernels_.bias_add, k_bias_, k_out_.ptr(), m, c.kv_width(), stream);
  add_bias(*backend_, kernels_.bias_add, v_bias_, v_out_.ptr(), m, c.kv_width(), stream);
  const auto rows = launch_shape({m, 1, 1}, kBlock, stream);
  if (kernels_.qk_norm_rope) {
    b.launch(kernels_.qk_norm_rope, rows, q_out_.ptr(), k_out_.ptr(), q_norm_.ptr(), k_norm_.ptr(), kv.positions(),
             inv_freq_.ptr(), m, c.q_heads, c.kv_heads, c.head_dim, c.rms_norm_eps, rope_scaling_);
  } else {
    if (c.qk_norm) {
      const uint32_t q_rows = m * c.q_heads, k_rows = m * c.kv_heads;
      b.launch(kernels_.rms_norm, launch_shape({q_rows, 1, 1}, kBlock, stream), q_out_.ptr(), q_norm_.ptr(), q_out_.ptr(),
               q_rows, c.head_dim, c.rms_norm_eps);
      b.launch(kernels_.rms_norm, launch_shape({k_rows, 1, 1}, kBlock, stream), k_out_.ptr(), k_norm_.ptr(), k_out_.ptr(),
               k_rows, c.head_dim, c.rms_norm_eps);
    }
    b.launch(kernels_.rope, rows, q_out_.ptr(), k_out_.ptr(), kv.positions(), inv_freq_.ptr(), m, c.q_heads, c.kv_heads,
             c.head_dim, rope_scaling_);
  }
  const StatePoolShape& s = kv.pool().shape();
  b.launch(kernels_.kv_append, rows, k_out_.ptr(), v_out_.ptr(), kv.slot_mapping(), kv.pool().k_cache(layer_),
           kv.pool().v_cache(layer_), m, c.kv_heads, c.head_dim, s.block_size, s.num_blocks);
  attend(kv, stream);
  if (c.output_gate) {
    gate_out_.ensure(b, size_t{m} * c.q_width() * kBf16);
    run_projection(b, set, gate_, 0, x, gate_out_.ptr(), m, scratch_, stream);
    b.launch(kernels_.output_gate, rows, attn_out_.ptr(), gate_out_.ptr(), attn_out_.ptr(), m, c.q_width());
  }
  run_projection(b, set, o_, 0, attn_out_.ptr(), out, m, scratch_, stream);
  add_bias(*backend_, kernels_.bias_add, o_bias_, out, m, c.hidden_size, stream);
}

void AttentionLayer::attend(const SequenceBatch& kv, uint64_t stream) {
  Backend& b = *backend_;
  const AttentionConfig& c = config_;
  const StatePoolShape& s = kv.pool().shape();
  const DevicePtr kc = kv.pool().k_cache(layer_), vc = kv.pool().v_cache(layer_);
  // The decode rows (a decode step's, or decode-shaped runs': one query per row) in one launch.
  if (const uint32_t seqs = kv.decode_rows(); seqs > 0) {
    const uint32_t partitions = kv.partitions();
    partials_.ensure(b, size_t{seqs} * c.q_heads * partitions * (c.head_dim + 2) * sizeof(float));
    b.launch(kernels_.decode, launch_shape({partitions, seqs * c.kv_heads, 1}, kBlock, stream), q_out_.ptr(), kc, vc,
             kv.block_tables(), kv.context_lens(), partials_.ptr(), seqs, c.q_heads, c.kv_heads, c.head_dim, s.block_size,
             kv.max_blocks(), s.num_blocks, c.scale());
    b.launch(kernels_.decode_combine, launch_shape({c.q_heads, seqs, 1}, kBlock, stream), partials_.ptr(), kv.context_lens(),
             attn_out_.ptr(), seqs, c.q_heads, c.head_dim, partitions);
  }
  const size_t row_bytes = size_t{c.q_width()} * kBf16;
  for (const SequenceBatch::Run& run : kv.runs().subspan(kv.decode_runs())) {
    const size_t offset = size_t{run.first_row} * row_bytes;
    b.launch(kernels_.prefill, launch_shape({ceil_div(run.rows, kPrefillRows), c.kv_heads, 1}, kBlock, stream),
             q_out_.at(offset), kc, vc, run.block_table, attn_out_.at(offset), run.rows, run.past, c.q_heads, c.kv_heads,
             c.head_dim, s.block_size, s.num_blocks, c.scale());
  }
}

std::vector<PlanStep> AttentionLayer::plan(uint32_t m) const {
  Backend& b = *backend_;
  const AttentionConfig& c = config_;
  const ProjectionSet& set = kernels_.projections;
  std::vector<PlanStep> steps;
  steps.push_back(describe_set_projection(b, set, "attn.q", m, c.q_width(), c.hidden_size));
  steps.push_back(describe_set_projection(b, set, "attn.k", m, c.kv_width(), c.hidden_size));
  steps.push_back(describe_set_projection(b, set, "attn.v", m, c.kv_width(), c.hidden_size));
  const auto step = [&](std::string name, KernelHandle k, std::string why, std::array<uint32_t, 3> grid) {
    steps.push_back(PlanStep{std::move(name), b.kernel_name(k), std::move(why), grid});
  };
  if (c.qkv_bias) step("attn.qkv_bias", kernels_.bias_add, "q, k, v biases (3 launches)", {m, 1, 1});
  if (kernels_.qk_norm_rope) {
    step("attn.qk_norm_rope", kernels_.qk_norm_rope, "fused q/k RMSNorm + RoPE", {m, 1, 1});
  } else {
    if (c.qk_norm) step("attn.qk_norm", kernels_.rms_norm, "q and k rows of head_dim (2 launches)", {m * c.q_heads, 1, 1});
    step("attn.rope", kernels_.rope, c.rope.scaling.type + " RoPE", {m, 1, 1});
  }
  step("attn.kv_append", kernels_.kv_append, "k, v into the layer's pools", {m, 1, 1});
  step("attn.attend", kernels_.prefill, "prefill: per sequence chunk (decode batches: attn_decode + combine)",
       {ceil_div(m, kPrefillRows), c.kv_heads, 1});
  if (c.output_gate) {
    steps.push_back(describe_set_projection(b, set, "attn.gate", m, c.q_width(), c.hidden_size));
    step("attn.output_gate", kernels_.output_gate, "attn * sigmoid(gate)", {m, 1, 1});
  }
  steps.push_back(describe_set_projection(b, set, "attn.o", m, c.hidden_size, c.q_width()));
  if (c.o_bias) step("attn.o_bias", kernels_.bias_add, "o bias", {m, 1, 1});
  return steps;
}

}  // namespace metrale::layers
