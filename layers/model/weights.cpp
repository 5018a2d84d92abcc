// SPDX-License-Identifier: MIT OR Apache-2.0
#include "weights.hpp"

#include "quant_synthetic.hpp"
#include "rng.hpp"
#include "safetensors.hpp"
#include "tensor_names.hpp"
#include "tensor_source.hpp"

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

DenseFfnWeights synthetic_dense(const std::string& prefix, uint32_t hidden, uint32_t inter, uint64_t seed,
                                WeightFormat format, uint32_t group) {
  return DenseFfnWeights{synthetic_quant(prefix + ".gate_up", format, gate_up_rows(inter), hidden, seed, 1, group),
                         synthetic_quant(prefix + ".down", format, hidden, inter, seed, 1, group)};
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
                         read_project_matrix(src, prefix + ".down", 1, hidden, inter)};
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

// ---- GPTQ names ----------------------------------------------------------------------------

// Checks that a GPTQ projection is symmetric group-128 with no act-order, then transposes its
// [K/8, N] words and [K/128, N] scales into our [N, K/8] / [N, K/128].
void read_gptq_projection(const TensorSource& src, const std::string& base, uint32_t n, uint32_t k,
                          uint32_t* qweight_out, uint16_t* scales_out, uint32_t row_offset) {
  const std::string qname = base + ".qweight";
  const std::string sname = base + ".scales";
  const uint32_t kw = k / 8;
  const uint32_t groups = k / kW4a16GroupSize;
  auto q = src.at(qname).read_u32(qname, {Dtype::i32, Dtype::u32}, {kw, n});
  auto s = src.at(sname).read_u16(sname, {Dtype::f16}, {groups, n});
  if (src.contains(base + ".qzeros")) {
    // Symmetric checkpoints store zero 8 as 7 (GPTQ v1's off-by-one) or 8 (v2) in every nibble.
    const std::string zname = base + ".qzeros";
    auto z = src.at(zname).read_u32(zname, {Dtype::i32, Dtype::u32}, {groups, (uint64_t{n} + 7) / 8});
    for (size_t i = 0; i < z.size(); ++i) {
      const uint32_t word = z[i];
      const bool last_word = (i % ((n + 7) / 8)) == (n + 7) / 8 - 1;
      const uint32_t used = last_word && n % 8 ? n % 8 : 8;
      const uint32_t mask = used == 8 ? 0xffffffffu : ((1u << (4 * used)) - 1);
      if ((word & mask) != (0x77777777u & mask) && (word & mask) != (0x88888888u & mask)) {
        throw Error(Status::invalid_argument,
                    src.at(zname).where(zname) + "not symmetric: zero points other than 8 (asymmetric GPTQ is not supported; "
                                                 "W4A16 here is symmetric, value (q - 8) * s)");
      }
    }
  }
  if (src.contains(base + ".g_idx")) {
    const std::string gname = base + ".g_idx";
    auto g = src.at(gname).read_u32(gname, {Dtype::i32}, {k});
    for (uint32_t i = 0; i < k; ++i) {
      if (g[i] != i / kW4a16GroupSize) {
        throw Error(Status::invalid_argument, src.at(gname).where(gname) + "act-order (desc_act) group order at k = " +
                                                  std::to_string(i) + ": expected group " + std::to_string(i / kW4a16GroupSize) +
                                                  ", got " + std::to_string(static_cast<int32_t>(g[i])) +
                                                  "; only sequential group-128 checkpoints are supported");
      }
    }
  }
  if (src.contains(base + ".bias")) {
    const std::string bname = base + ".bias";
    auto b = src.at(bname).read_f32(bname, {n});
    if (std::any_of(b.begin(), b.end(), [](float v) { return v != 0.0f; })) {
      throw Error(Status::invalid_argument, src.at(bname).where(bname) + "non-zero bias: the W4A16 projections have no bias");
    }
  }
  for (uint32_t w = 0; w < kw; ++w) {
    for (uint32_t row = 0; row < n; ++row) qweight_out[size_t{row + row_offset} * kw + w] = q[size_t{w} * n + row];
  }
  for (uint32_t g = 0; g < groups; ++g) {
    for (uint32_t row = 0; row < n; ++row) scales_out[size_t{row + row_offset} * groups + g] = s[size_t{g} * n + row];
  }
}

// gate_proj and up_proj into one [2I, H] matrix (gate rows first), down_proj into [H, I].
void read_gptq_ffn(const TensorSource& src, const std::string& prefix, uint32_t hidden, uint32_t inter,
                   QuantMatrix& gate_up, QuantMatrix& down, uint32_t index) {
  const size_t gu_words = gate_up.words_per_matrix() * index;
  const size_t gu_scales = gate_up.scales_per_matrix() * index;
  read_gptq_projection(src, prefix + "gate_proj", inter, hidden, gate_up.qweight.data() + gu_words,
                       gate_up.scales.data() + gu_scales, 0);
  read_gptq_projection(src, prefix + "up_proj", inter, hidden, gate_up.qweight.data() + gu_words,
                       gate_up.scales.data() + gu_scales, inter);
  read_gptq_projection(src, prefix + "down_proj", hidden, inter, down.qweight.data() + down.words_per_matrix() * index,
                       down.scales.data() + down.scales_per_matrix() * index, 0);
}

std::string gptq_prefix(const TensorSource& src, const WeightLoadOptions& options) {
  std::map<uint32_t, std::string> layers;
  for (const auto& name : src.names()) {
    const auto parsed = mlp_layer_of(name);
    if (!parsed) continue;
    if (!parsed->layer) {
      throw Error(Status::invalid_argument, src.description() + ": tensor '" + display_name(name) + "': layer number " +
                                                display_name(parsed->layer_digits) + " does not fit in 32 bits");
    }
    layers.emplace(*parsed->layer, std::string(parsed->prefix));
  }
  if (layers.empty()) {
    throw Error(Status::invalid_argument,
                src.description() + ": no FFN tensors found: expected the project's names (ffn.gate_up.qweight, "
                                    "ffn.router.weight, ...) or GPTQ names (model.layers.<L>.mlp.gate_proj.qweight, ...)");
  }
  if (!options.layer) return layers.begin()->second;
  auto it = layers.find(*options.layer);
  if (it == layers.end()) {
    throw Error(Status::not_found, src.description() + ": no FFN tensors for layer " + std::to_string(*options.layer) +
                                       " (layers " + std::to_string(layers.begin()->first) + ".." +
                                       std::to_string(layers.rbegin()->first) + " present)");
  }
  return it->second;
}

FfnWeights load_gptq(const TensorSource& src, const ModelConfig& c, const WeightLoadOptions& options) {
  const std::string prefix = gptq_prefix(src, options);
  FfnWeights w;
  w.kind = c.ffn_kind();
  if (w.kind == FfnKind::dense) {
    DenseFfnWeights d{w4a16_zeros(prefix + "gate_proj+up_proj", gate_up_rows(c.intermediate_size), c.hidden_size),
                      w4a16_zeros(prefix + "down_proj", c.hidden_size, c.intermediate_size)};
    read_gptq_ffn(src, prefix, c.hidden_size, c.intermediate_size, d.gate_up, d.down, 0);
    w.dense = std::move(d);
  } else if (w.kind == FfnKind::moe) {
    MoeWeights m;
    m.experts = c.num_experts;
    m.hidden = c.hidden_size;
    m.router = src.at(prefix + "gate.weight").read_f32(prefix + "gate.weight", {c.num_experts, c.hidden_size});
    const uint32_t inter = c.moe_intermediate_size;
    m.gate_up = w4a16_zeros(prefix + "experts.*.gate_proj+up_proj", gate_up_rows(inter), c.hidden_size, c.num_experts);
    m.down = w4a16_zeros(prefix + "experts.*.down_proj", c.hidden_size, inter, c.num_experts);
    for (uint32_t e = 0; e < c.num_experts; ++e) {
      read_gptq_ffn(src, prefix + "experts." + std::to_string(e) + ".", c.hidden_size, inter, m.gate_up, m.down, e);
    }
    if (c.shared_expert_intermediate_size > 0) {
      const uint32_t si = c.shared_expert_intermediate_size;
      DenseFfnWeights d{w4a16_zeros(prefix + "shared_expert.gate_proj+up_proj", gate_up_rows(si), c.hidden_size),
                        w4a16_zeros(prefix + "shared_expert.down_proj", c.hidden_size, si)};
      read_gptq_ffn(src, prefix + "shared_expert.", c.hidden_size, si, d.gate_up, d.down, 0);
      m.shared_expert = std::move(d);
      const std::string gate = prefix + "shared_expert_gate.weight";
      if (src.contains(gate)) m.shared_expert_gate = src.at(gate).read_f32(gate, {1, c.hidden_size});
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

FfnWeights synthetic_ffn_weights(const ModelConfig& c, uint64_t seed, const SyntheticFormats& formats) {
  c.validate();
  FfnWeights w;
  w.kind = c.ffn_kind();
  if (w.kind == FfnKind::dense) {
    w.dense = synthetic_dense("ffn", c.hidden_size, c.intermediate_size, seed, formats.weights, formats.group);
  } else if (w.kind == FfnKind::moe) {
    MoeWeights m;
    m.experts = c.num_experts;
    m.hidden = c.hidden_size;
    m.router = synthetic_f32("ffn.router.weight", size_t{c.num_experts} * c.hidden_size, router_amplitude(c.hidden_size), seed);
    const WeightFormat experts = formats.experts.value_or(formats.weights);
    m.gate_up = synthetic_quant("ffn.experts.gate_up", experts, gate_up_rows(c.moe_intermediate_size), c.hidden_size, seed, c.num_experts,
                                formats.group);
    m.down = synthetic_quant("ffn.experts.down", experts, c.hidden_size, c.moe_intermediate_size, seed, c.num_experts,
                             formats.group);
    if (c.shared_expert_intermediate_size > 0) {
      m.shared_expert = synthetic_dense("ffn.shared_expert", c.hidden_size, c.shared_expert_intermediate_size, seed,
                                        formats.weights, formats.group);
      m.shared_expert_gate = synthetic_f32("ffn.shared_expert_gate.weight", c.hidden_size, router_amplitude(c.hidden_size), seed);
    }
    w.moe = std::move(m);
  }
  return w;
}

FfnWeights load_ffn_weights(const std::filesystem::path& path, const ModelConfig& config, const WeightLoadOptions& options) {
  config.validate();
  TensorSource src(path);
  const bool project = src.contains("ffn.gate_up.qweight") || src.contains("ffn.router.weight") ||
                       src.contains("ffn.experts.gate_up.qweight");
  FfnWeights w = project ? load_project(src, config) : load_gptq(src, config, options);
  w.validate(config);
  return w;
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

}  // namespace metrale::layers
