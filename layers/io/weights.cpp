// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/weights.hpp"

#include "io/checkpoint.hpp"

#include "core/quant_synthetic.hpp"
#include "core/rng.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_names.hpp"
#include "io/tensor_source.hpp"

#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

namespace metrale::layers {

namespace {

[[noreturn]] void shape_error(const std::string& what) { throw Error(Status::invalid_argument, what); }

void expect_shape(const QuantMatrix& m, uint32_t batch, uint32_t n, uint32_t k) {
  m.validate();
  if (m.batch != batch || m.n != n || m.k != k) {
    shape_error(m.name + ": shape [" + std::to_string(m.batch) + ", " + std::to_string(m.n) + ", " + std::to_string(m.k) +
                "], expected [" + std::to_string(batch) + ", " + std::to_string(n) + ", " + std::to_string(k) + "]");
  }
}

std::vector<float> synthetic_f32(const std::string& name, size_t count, double amplitude, uint64_t seed) {
  SplitMix64 rng(derive_seed(seed, name));
  std::vector<float> out(count);
  for (auto& v : out) v = static_cast<float>(rng.uniform(-amplitude, amplitude));
  return out;
}

SyntheticQuantOptions synthetic_options(const SyntheticFormats& f) { return {f.group, f.symmetric, f.act_order}; }

DenseFfnWeights synthetic_dense(const std::string& prefix, uint32_t hidden, uint32_t inter, uint64_t seed,
                                WeightFormat format, const SyntheticFormats& f) {
  return DenseFfnWeights{synthetic_quant(prefix + ".gate_up", format, gate_up_rows(inter), hidden, seed, 1, synthetic_options(f)),
                         synthetic_quant(prefix + ".down", format, hidden, inter, seed, 1, synthetic_options(f)), {}, {}};
}

// Router rows uniform in ±a with a = 4.5/sqrt(H): logits of inputs in ±1 then spread ~1.5,
// enough that the top-k differ from token to token.
double router_amplitude(uint32_t hidden) { return 4.5 / std::sqrt(static_cast<double>(hidden)); }

// ---- The project's names -------------------------------------------------------------------

QuantMatrix read_project_matrix(const TensorSource& src, const std::string& name, uint32_t batch, uint32_t n,
                                uint32_t k) {
  check_w4a16_shape(name, n, k, batch);
  std::vector<uint64_t> qshape{n, k / 8};
  std::vector<uint64_t> sshape{n, k / kW4a16GroupSize};
  if (batch > 1 || name.find(".experts.") != std::string::npos) {
    qshape.insert(qshape.begin(), batch);
    sshape.insert(sshape.begin(), batch);
  }
  QuantMatrix m;
  m.name = name;
  m.batch = batch;
  m.n = n;
  m.k = k;
  m.qweight = src.at(name + ".qweight").read_u32(name + ".qweight", {Dtype::u32, Dtype::i32}, qshape);
  m.scales = src.at(name + ".scales").read_u16(name + ".scales", {Dtype::f16}, sshape);
  m.validate();
  return m;
}

DenseFfnWeights read_project_dense(const TensorSource& src, const std::string& prefix, uint32_t hidden, uint32_t inter) {
  return DenseFfnWeights{read_project_matrix(src, prefix + ".gate_up", 1, gate_up_rows(inter), hidden),
                         read_project_matrix(src, prefix + ".down", 1, hidden, inter), {}, {}};
}

FfnWeights load_project(const TensorSource& src, const ModelConfig& c) {
  FfnWeights w;
  w.kind = c.ffn_kind();
  if (w.kind == FfnKind::dense) {
    w.dense = read_project_dense(src, "ffn", c.hidden_size, c.intermediate_size);
  } else if (w.kind == FfnKind::moe) {
    MoeWeights m;
    m.experts = c.num_experts;
    m.hidden = c.hidden_size;
    m.router = src.at("ffn.router.weight").read_f32("ffn.router.weight", {c.num_experts, c.hidden_size});
    m.gate_up = read_project_matrix(src, "ffn.experts.gate_up", c.num_experts, gate_up_rows(c.moe_intermediate_size), c.hidden_size);
    m.down = read_project_matrix(src, "ffn.experts.down", c.num_experts, c.hidden_size, c.moe_intermediate_size);
    if (c.shared_expert_intermediate_size > 0) {
      m.shared_expert = read_project_dense(src, "ffn.shared_expert", c.hidden_size, c.shared_expert_intermediate_size);
      if (src.contains("ffn.shared_expert_gate.weight")) {
        m.shared_expert_gate = src.at("ffn.shared_expert_gate.weight").read_f32("ffn.shared_expert_gate.weight", {1, c.hidden_size});
      }
    }
    w.moe = std::move(m);
  }
  return w;
}

}  // namespace

namespace {

// A layer's projections run under one kernel family: their formats and groups agree.
void expect_same_format(const QuantMatrix& a, const QuantMatrix& b) {
  if (a.format != b.format || a.group != b.group) {
    shape_error(a.name + " is " + weight_format_name(a.format) + " (group " + std::to_string(a.group) + "), but " + b.name +
                " is " + weight_format_name(b.format) + " (group " + std::to_string(b.group) +
                "): the projections of one layer share a format");
  }
}

}  // namespace

void DenseFfnWeights::validate(uint32_t hidden, uint32_t inter) const {
  expect_shape(gate_up, 1, gate_up_rows(inter), hidden);
  expect_shape(down, 1, hidden, inter);
  expect_same_format(gate_up, down);
  if (gate_up_bias.empty() != down_bias.empty() || (has_bias() && (gate_up_bias.size() != gate_up.n || down_bias.size() != down.n))) {
    shape_error(gate_up.name + ": the FFN's biases are " + std::to_string(gate_up_bias.size()) + " and " +
                std::to_string(down_bias.size()) + " values, expected none or " + std::to_string(gate_up.n) + " and " +
                std::to_string(down.n));
  }
}

size_t MoeWeights::bytes() const noexcept {
  size_t total = router.size() * sizeof(float) + gate_up.bytes() + down.bytes() + shared_expert_gate.size() * sizeof(float);
  if (shared_expert) total += shared_expert->bytes();
  return total;
}

void MoeWeights::validate(const ModelConfig& c) const {
  if (experts != c.num_experts || hidden != c.hidden_size) {
    shape_error("MoE weights for " + std::to_string(experts) + " experts of hidden " + std::to_string(hidden) +
                ", but " + c.source + " has " + std::to_string(c.num_experts) + " experts of hidden " +
                std::to_string(c.hidden_size));
  }
  if (router.size() != size_t{experts} * hidden) {
    shape_error("ffn.router.weight: " + std::to_string(router.size()) + " values, expected [" + std::to_string(experts) +
                ", " + std::to_string(hidden) + "]");
  }
  expect_shape(gate_up, experts, gate_up_rows(c.moe_intermediate_size), hidden);
  expect_shape(down, experts, hidden, c.moe_intermediate_size);
  expect_same_format(gate_up, down);
  if ((c.shared_expert_intermediate_size > 0) != shared_expert.has_value()) {
    shape_error(c.source + ": shared_expert_intermediate_size = " + std::to_string(c.shared_expert_intermediate_size) +
                (shared_expert ? ", but the weights have a shared expert" : ", but the weights have no shared expert"));
  }
  if (shared_expert) shared_expert->validate(hidden, c.shared_expert_intermediate_size);
  if (!shared_expert_gate.empty() && shared_expert_gate.size() != hidden) {
    shape_error("ffn.shared_expert_gate.weight: " + std::to_string(shared_expert_gate.size()) + " values, expected [1, " +
                std::to_string(hidden) + "]");
  }
}

size_t FfnWeights::bytes() const noexcept {
  if (dense) return dense->bytes();
  if (moe) return moe->bytes();
  return 0;
}

void FfnWeights::validate(const ModelConfig& config) const {
  if (kind != config.ffn_kind()) {
    shape_error(std::string("weights are for a ") + ffn_kind_name(kind) + " FFN, but " + config.source + " describes a " +
                ffn_kind_name(config.ffn_kind()) + " FFN");
  }
  if (kind == FfnKind::dense) {
    if (!dense) shape_error("dense FFN weights missing");
    dense->validate(config.hidden_size, config.intermediate_size);
  }
  if (kind == FfnKind::moe) {
    if (!moe) shape_error("MoE weights missing");
    moe->validate(config);
  }
}

SyntheticFormats formats_of(const FfnWeights& weights) {
  SyntheticFormats f;
  const DenseFfnWeights* dense = weights.dense ? &*weights.dense : nullptr;
  if (weights.moe) {
    f.experts = weights.moe->gate_up.format;
    f.group = weights.moe->gate_up.group;
    f.act_order = !weights.moe->gate_up.perm.empty() || !weights.moe->down.perm.empty();
    if (weights.moe->shared_expert) dense = &*weights.moe->shared_expert;
    f.weights = dense ? dense->format() : *f.experts;
  }
  if (dense) {
    f.weights = dense->format();
    f.act_order = f.act_order || dense->act_order();
    if (!weights.moe) f.group = dense->gate_up.group;
  }
  return f;
}

FfnWeights synthetic_ffn_weights(const ModelConfig& c, uint64_t seed, const SyntheticFormats& formats) {
  c.validate();
  FfnWeights w;
  w.kind = c.ffn_kind();
  if (w.kind == FfnKind::dense) {
    w.dense = synthetic_dense("ffn", c.hidden_size, c.intermediate_size, seed, formats.weights, formats);
  } else if (w.kind == FfnKind::moe) {
    MoeWeights m;
    m.experts = c.num_experts;
    m.hidden = c.hidden_size;
    m.router = synthetic_f32("ffn.router.weight", size_t{c.num_experts} * c.hidden_size, router_amplitude(c.hidden_size), seed);
    const WeightFormat experts = formats.experts.value_or(formats.weights);
    m.gate_up = synthetic_quant("ffn.experts.gate_up", experts, gate_up_rows(c.moe_intermediate_size), c.hidden_size, seed,
                                c.num_experts, synthetic_options(formats));
    m.down = synthetic_quant("ffn.experts.down", experts, c.hidden_size, c.moe_intermediate_size, seed, c.num_experts,
                             synthetic_options(formats));
    if (c.shared_expert_intermediate_size > 0) {
      m.shared_expert = synthetic_dense("ffn.shared_expert", c.hidden_size, c.shared_expert_intermediate_size, seed,
                                        formats.weights, formats);
      m.shared_expert_gate = synthetic_f32("ffn.shared_expert_gate.weight", c.hidden_size, router_amplitude(c.hidden_size), seed);
    }
    w.moe = std::move(m);
  }
  return w;
}

FfnWeights load_project_weights(const TensorSource& src, const ModelConfig& config) {
  config.validate();
  FfnWeights w = load_project(src, config);
  w.validate(config);
  return w;
}

bool has_project_names(const TensorSource& src) {
  return src.contains("ffn.gate_up.qweight") || src.contains("ffn.router.weight") || src.contains("ffn.experts.gate_up.qweight");
}

void save_ffn_weights(const FfnWeights& w, const ModelConfig& config, const std::filesystem::path& path) {
  w.validate(config);
  SafetensorsWriter out;
  out.set_metadata("format", "metrale-w4a16");
  out.set_metadata("format_version", "1");
  out.set_metadata("group_size", "128");
  out.set_metadata("config", config.to_json().dump());
  auto add_matrix = [&](const QuantMatrix& m, const std::string& name, bool stacked) {
    std::vector<uint64_t> q{m.n, m.k / 8};
    std::vector<uint64_t> s{m.n, m.k / kW4a16GroupSize};
    if (stacked) {
      q.insert(q.begin(), m.batch);
      s.insert(s.begin(), m.batch);
    }
    out.add(name + ".qweight", Dtype::u32, q, std::span<const uint32_t>(m.qweight));
    out.add(name + ".scales", Dtype::f16, s, std::span<const uint16_t>(m.scales));
  };
  auto add_dense = [&](const DenseFfnWeights& d, const std::string& prefix) {
    add_matrix(d.gate_up, prefix + ".gate_up", false);
    add_matrix(d.down, prefix + ".down", false);
  };
  if (w.dense) add_dense(*w.dense, "ffn");
  if (w.moe) {
    const MoeWeights& m = *w.moe;
    out.add("ffn.router.weight", Dtype::f32, {m.experts, m.hidden}, std::span<const float>(m.router));
    add_matrix(m.gate_up, "ffn.experts.gate_up", true);
    add_matrix(m.down, "ffn.experts.down", true);
    if (m.shared_expert) add_dense(*m.shared_expert, "ffn.shared_expert");
    if (!m.shared_expert_gate.empty()) {
      out.add("ffn.shared_expert_gate.weight", Dtype::f32, {1, m.hidden}, std::span<const float>(m.shared_expert_gate));
    }
  }
  out.write(path);
}

FfnWeights load_ffn_weights(const std::filesystem::path& path, const ModelConfig& config, const WeightLoadOptions& options) {
  config.validate();
  const CheckpointFiles files = open_checkpoint(path);
  if (has_project_names(*files.tensors)) return load_project_weights(*files.tensors, config);
  return load_checkpoint(files, options.layer, config).weights;
}

}  // namespace metrale::layers
