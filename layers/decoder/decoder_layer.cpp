// SPDX-License-Identifier: MIT OR Apache-2.0
#include "decoder/decoder_layer.hpp"

#include "core/device_buffer.hpp"
#include "core/launch_shape.hpp"
#include "core/lookup_notes.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/status.hpp>

namespace metrale::layers {

namespace {

constexpr uint32_t kBlock = 128;
using catalogue::signature;
constexpr auto kRmsNormSig = signature("norm", "rms_norm");
constexpr auto kZeroCentredSig = signature("norm", "rms_norm_zero_centred");
constexpr auto kRmsNormResidualSig = signature("norm", "rms_norm_residual");
constexpr auto kAddSig = signature("norm", "add");



}  // namespace

DecoderNormKernels resolve_decoder_norms(Backend& backend, bool zero_centred) {
  DecoderNormKernels k;
  if (zero_centred) {
    // No fused add + norm computes the zero-centred form: add, then the norm (decoder_layer.hpp).
    k.rms_norm = backend.lookup("norm", "rms_norm_zero_centred", plain_request(LookupKind::require, kZeroCentredSig));
  } else {
    k.rms_norm = backend.lookup("norm", "rms_norm", plain_request(LookupKind::require, kRmsNormSig));
    k.rms_norm_residual = backend.lookup("norm", "rms_norm_residual", plain_request(LookupKind::try_lookup, kRmsNormResidualSig));
  }
  k.add = backend.lookup("norm", "add", plain_request(LookupKind::require, kAddSig));
  return k;
}

void launch_rms_norm(Backend& backend, KernelHandle rms_norm, DevicePtr x, DevicePtr weight, DevicePtr y, uint32_t m,
                     uint32_t h, float eps, uint64_t stream) {
  backend.launch(rms_norm, launch_shape({m, 1, 1}, kBlock, stream), x, weight, y, m, h, eps);
}

std::unique_ptr<DecoderLayer> DecoderLayer::build(Backend& backend, const DecoderConfig& config,
                                                  const DecoderLayerWeights& weights, const FfnBuildOptions& options,
                                                  std::optional<uint32_t> cache_layer) {
  const uint32_t hidden = config.attention.hidden_size;
  if (weights.input_norm.size() != hidden || weights.post_norm.size() != hidden) {
    throw Error(Status::invalid_argument, "decoder layer " + std::to_string(weights.layer) + ": norm weights of " +
                                              std::to_string(weights.input_norm.size()) + " and " +
                                              std::to_string(weights.post_norm.size()) + " values, expected " +
                                              std::to_string(hidden));
  }
  std::unique_ptr<AttentionLayer> attention;
  std::unique_ptr<DeltaNetLayer> deltanet;
  const uint32_t state_layer = cache_layer.value_or(weights.layer);
  if (weights.mixer == TokenMixer::linear_attention) {
    deltanet = std::make_unique<DeltaNetLayer>(
        DeltaNetLayer::build(backend, config.deltanet, weights.deltanet, state_layer, options.activations));
  } else {
    attention = std::make_unique<AttentionLayer>(
        AttentionLayer::build(backend, config.attention, weights.attention, state_layer, options.activations));
  }
  const DecoderNormKernels norms = resolve_decoder_norms(backend, config.architecture.spec->zero_centred_norms);
  FfnComponent ffn = FfnComponent::build(backend, weights.ffn_config, weights.ffn, options);
  std::unique_ptr<DecoderLayer> d(new DecoderLayer(std::move(ffn)));
  d->attention_ = std::move(attention);
  d->deltanet_ = std::move(deltanet);
  d->backend_ = &backend;
  d->layer_ = weights.layer;
  d->hidden_ = hidden;
  d->eps_ = config.rms_norm_eps;
  d->norms_ = norms;
  d->input_norm_ = device_copy(backend, weights.input_norm);
  d->post_norm_ = device_copy(backend, weights.post_norm);
  backend.synchronize();
  return d;
}

DevicePtr DecoderLayer::forward(const LayerBatch& batch, uint64_t stream) {
  const SequenceBatch* kv = batch.state;
  if (!kv) throw Error(Status::invalid_argument, "decoder layer " + std::to_string(layer_) + ": the batch carries no KV cache state (a SequenceBatch)");
  out_.ensure(*backend_, size_t{batch.m} * hidden_ * kBf16);
  forward_into(*kv, batch.x, out_.ptr(), stream);
  return out_.ptr();
}

void DecoderLayer::forward_into(const SequenceBatch& kv, DevicePtr x, DevicePtr out, uint64_t stream) {
  Backend& b = *backend_;
  const uint32_t m = kv.rows(), h = hidden_;
  const size_t bytes = size_t{m} * h * kBf16;
  normed_.ensure(b, bytes);
  attn_out_.ensure(b, bytes);
  residual_.ensure(b, bytes);
  launch_rms_norm(b, norms_.rms_norm, x, input_norm_.ptr(), normed_.ptr(), m, h, eps_, stream);
  mix(kv, normed_.ptr(), attn_out_.ptr(), stream);
  const auto rows = launch_shape({m, 1, 1}, kBlock, stream);
  if (ffn_.is_none()) {
    b.launch(norms_.add, rows, attn_out_.ptr(), x, out, m, h);
    return;
  }
  if (norms_.rms_norm_residual) {
    b.launch(norms_.rms_norm_residual, rows, attn_out_.ptr(), x, post_norm_.ptr(), normed_.ptr(), residual_.ptr(), m, h, eps_);
  } else {
    b.launch(norms_.add, rows, attn_out_.ptr(), x, residual_.ptr(), m, h);
    launch_rms_norm(b, norms_.rms_norm, residual_.ptr(), post_norm_.ptr(), normed_.ptr(), m, h, eps_, stream);
  }
  const DevicePtr f = ffn_.forward(normed_.ptr(), m, stream);
  b.launch(norms_.add, rows, f, residual_.ptr(), out, m, h);
}

void DecoderLayer::mix(const SequenceBatch& state, DevicePtr x, DevicePtr out, uint64_t stream) {
  if (deltanet_) deltanet_->forward_into(state, x, out, stream);
  else attention_->forward_into(state, x, out, stream);
}

const std::string& DecoderLayer::mixer_tier() const noexcept {
  return deltanet_ ? deltanet_->kernels().projections.tier : attention_->kernels().projections.tier;
}

size_t DecoderLayer::weight_bytes() const noexcept {
  return (deltanet_ ? deltanet_->weight_bytes() : attention_->weight_bytes()) + ffn_.weight_bytes();
}

std::vector<PlanStep> DecoderLayer::plan(uint32_t m) const {
  Backend& b = *backend_;
  std::vector<PlanStep> steps;
  steps.push_back(PlanStep{"input_norm", b.kernel_name(norms_.rms_norm), "input_layernorm", {m, 1, 1}});
  for (auto& s : deltanet_ ? deltanet_->plan(m) : attention_->plan(m)) steps.push_back(std::move(s));
  if (!ffn_.is_none()) {
    if (norms_.rms_norm_residual) {
      steps.push_back(PlanStep{"residual+post_norm", b.kernel_name(norms_.rms_norm_residual), "fused add + post_attention_layernorm", {m, 1, 1}});
    } else {
      steps.push_back(PlanStep{"residual", b.kernel_name(norms_.add), "no rms_norm_residual: add, then rms_norm", {m, 1, 1}});
      steps.push_back(PlanStep{"post_norm", b.kernel_name(norms_.rms_norm), "post_attention_layernorm", {m, 1, 1}});
    }
    for (auto& s : ffn_.plan(m)) steps.push_back(std::move(s));
  }
  steps.push_back(PlanStep{"residual", b.kernel_name(norms_.add), "the layer's output", {m, 1, 1}});
  return steps;
}

}  // namespace metrale::layers
