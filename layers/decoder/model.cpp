// SPDX-License-Identifier: MIT OR Apache-2.0
#include "decoder/model.hpp"

#include "core/device_buffer.hpp"
#include "core/launch_shape.hpp"
#include "core/lookup_notes.hpp"

#include <metrale/status.hpp>

#include <algorithm>

namespace metrale::layers {

std::unique_ptr<DecoderModel> DecoderModel::build(Backend& backend, const DecoderConfig& config, ModelWeightSource& weights,
                                                  const FfnBuildOptions& options,
                                                  const std::function<void(uint32_t, uint32_t)>& progress) {
  const uint32_t hidden = config.attention.hidden_size, vocab = config.vocab_size;
  std::unique_ptr<DecoderModel> m(new DecoderModel());
  m->backend_ = &backend;
  m->config_ = config;
  // Layer 0 first: its attention's kernels are the ones a backend is likeliest to lack, and are
  // named first when it does. Then the head, while little else is on the device (a tied one is the
  // embedding's size again on the host as it uploads), then the table and the other layers.
  // Each layer's state index among the layers of its mixer kind (the pool keeps KV for attention
  // layers only, recurrent slots for DeltaNet layers only).
  std::vector<uint32_t> state_index(config.num_layers);
  uint32_t attention_layers = 0, recurrent_layers = 0;
  for (uint32_t l = 0; l < config.num_layers; ++l)
    state_index[l] = config.architecture.layer_mixers.at(l) == TokenMixer::linear_attention ? recurrent_layers++ : attention_layers++;
  m->layers_.push_back(DecoderLayer::build(backend, config, weights.layer(0), options, state_index[0]));
  if (progress) progress(1, config.num_layers);
  m->upload_head(weights.head(), options);
  m->embedding_ = weights.embedding();
  const std::vector<uint16_t> final_norm = weights.final_norm();
  if (m->embedding_.vocab() != vocab || m->embedding_.hidden() != hidden || final_norm.size() != hidden) {
    throw Error(Status::invalid_argument, config.source + ": the model's weights do not match its config (embedding or "
                                                          "final norm)");
  }
  m->final_norm_ = device_copy(backend, final_norm);
  for (uint32_t l = 1; l < config.num_layers; ++l) {
    m->layers_.push_back(DecoderLayer::build(backend, config, weights.layer(l), options, state_index[l]));
    if (progress) progress(l + 1, config.num_layers);
  }
  m->norms_ = resolve_decoder_norms(backend, config.architecture.spec->zero_centred_norms);
  backend.synchronize();
  return m;
}

void DecoderModel::upload_head(const QuantMatrix& head, const FfnBuildOptions& options) {
  ProjectionSetRequest request;
  request.name = "lm_head";
  request.format = head.format;
  request.act_order = !head.perm.empty();
  request.shapes = {ProjectionShape{"lm_head", config_.vocab_size, config_.attention.hidden_size}};
  request.model_type = config_.attention.model_type;
  request.activations = options.activations;
  head_set_ = resolve_projection_set(*backend_, request);
  head_ = head_set_.upload(*backend_, head);
  backend_->synchronize();
}

StatePoolShape DecoderModel::cache_shape(uint64_t tokens, uint32_t block_size, uint32_t sequences) const {
  StatePoolShape s;
  s.kv_heads = config_.attention.kv_heads;
  s.head_dim = config_.attention.head_dim;
  s.block_size = block_size;
  const auto& mixers = config_.architecture.layer_mixers;
  const auto recurrent = static_cast<uint32_t>(std::count(mixers.begin(), mixers.end(), TokenMixer::linear_attention));
  s.layers = std::max<uint32_t>(config_.num_layers - recurrent, 1);
  if (recurrent > 0) s.recurrent = RecurrentStateShape{recurrent, config_.deltanet.state_bytes(), std::max<uint32_t>(sequences, 1)};
  const uint64_t blocks = (std::max<uint64_t>(tokens, 1) + block_size - 1) / std::max<uint32_t>(block_size, 1);
  if (blocks > UINT32_MAX) throw Error(Status::invalid_argument, "KV cache of " + std::to_string(tokens) + " tokens: too many blocks");
  s.num_blocks = static_cast<uint32_t>(blocks);
  return s;
}

DevicePtr DecoderModel::forward(const SequenceBatch& kv, std::span<const int32_t> ids, uint64_t stream) {
  Backend& b = *backend_;
  const uint32_t m = kv.rows(), h = config_.attention.hidden_size;
  if (ids.size() != m) {
    throw Error(Status::invalid_argument, "forward: " + std::to_string(ids.size()) + " ids for a batch of " + std::to_string(m) + " rows");
  }
  for (auto& buffer : hidden_) buffer.ensure(b, size_t{m} * h * kBf16);
  gathered_.resize(size_t{m} * h);
  embedding_.gather(ids, gathered_);
  b.copy_to_device(hidden_[0].ptr(), gathered_.data(), gathered_.size() * kBf16, stream);
  int current = 0;
  for (auto& layer : layers_) {
    layer->forward_into(kv, hidden_[current].ptr(), hidden_[1 - current].ptr(), stream);
    current = 1 - current;
  }
  return hidden_[current].ptr();
}

DevicePtr DecoderModel::logits(DevicePtr hidden, uint32_t hidden_rows, std::span<const uint32_t> rows, uint64_t stream) {
  Backend& b = *backend_;
  const uint32_t h = config_.attention.hidden_size, n = static_cast<uint32_t>(rows.size());
  const size_t row_bytes = size_t{h} * kBf16;
  selected_.ensure(b, std::max<size_t>(n, 1) * row_bytes);
  for (uint32_t i = 0; i < n; ++i) {
    if (rows[i] >= hidden_rows) {
      throw Error(Status::invalid_argument, "logits of row " + std::to_string(rows[i]) + " of " + std::to_string(hidden_rows));
    }
    b.copy_device(selected_.at(i * row_bytes), hidden.offset(rows[i] * row_bytes), row_bytes, stream);
  }
  launch_rms_norm(b, norms_.rms_norm, selected_.ptr(), final_norm_.ptr(), selected_.ptr(), n, h, config_.rms_norm_eps, stream);
  logits_.ensure(b, size_t{n} * config_.vocab_size * kBf16);
  run_projection(b, head_set_, head_, 0, selected_.ptr(), logits_.ptr(), n, scratch_, stream);
  return logits_.ptr();
}

std::vector<PlanStep> DecoderModel::plan(uint32_t m, uint32_t logit_rows) const {
  Backend& b = *backend_;
  std::vector<PlanStep> steps;
  steps.push_back(PlanStep{"embed", "host", "embed_tokens rows gathered on the host, uploaded", {m, 1, 1}});
  for (const auto& layer : layers_) {
    for (auto& s : layer->plan(m)) {
      s.step = "layers." + std::to_string(layer->layer()) + "." + s.step;
      steps.push_back(std::move(s));
    }
  }
  steps.push_back(PlanStep{"final_norm", b.kernel_name(norms_.rms_norm), "model.norm", {logit_rows, 1, 1}});
  steps.push_back(describe_set_projection(b, head_set_, "lm_head", logit_rows, config_.vocab_size, config_.attention.hidden_size));
  return steps;
}

std::vector<std::string> DecoderModel::tiers() const {
  std::vector<std::string> out;
  const auto add = [&](const std::string& t) {
    if (!t.empty() && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  for (const auto& layer : layers_) {
    add(layer->mixer_tier());
    for (const auto& t : layer->ffn().tiers()) add(t);
  }
  add(head_set_.tier);
  return out;
}

size_t DecoderModel::weight_bytes() const noexcept {
  size_t bytes = final_norm_.bytes() + head_.bytes_per_matrix();
  for (const auto& layer : layers_) bytes += layer->weight_bytes();
  return bytes;
}

}  // namespace metrale::layers
