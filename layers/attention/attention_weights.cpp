// SPDX-License-Identifier: MIT OR Apache-2.0
#include "attention/attention_weights.hpp"

#include "core/numeric.hpp"
#include "core/quant_synthetic.hpp"
#include "core/rng.hpp"
#include "io/linear_reader.hpp"

#include <metrale/status.hpp>

#include <array>

namespace metrale::layers {

namespace {

void invalid(const std::string& what) { throw Error(Status::invalid_argument, what); }

void check_vector(const std::vector<uint16_t>& v, bool wanted, size_t size, const std::string& name) {
  if (!wanted && !v.empty()) invalid(name + ": the config declares none, but " + std::to_string(v.size()) + " values were given");
  if (wanted && v.size() != size) {
    invalid(name + ": " + std::to_string(v.size()) + " values, expected " + std::to_string(size));
  }
}

// q_proj of a gated attention, [2 * q_width, hidden] with rows per head [q_h ; gate_h], as the q and
// gate projections (transformers: view(..., heads, 2 * head_dim), then chunk(2)).
void split_gate(const QuantMatrix& fused, const AttentionConfig& c, AttentionWeights& w) {
  std::vector<uint32_t> q_rows, gate_rows;
  for (uint32_t h = 0; h < c.q_heads; ++h) {
    for (uint32_t i = 0; i < c.head_dim; ++i) {
      q_rows.push_back(2 * h * c.head_dim + i);
      gate_rows.push_back((2 * h + 1) * c.head_dim + i);
    }
  }
  w.q = select_rows(fused.name + " (q rows)", fused, q_rows);
  w.gate = select_rows(fused.name + " (gate rows)", fused, gate_rows);
}

}  // namespace

std::vector<uint16_t> synthetic_bf16_values(uint64_t seed, const std::string& name, size_t count, double center, double spread) {
  SplitMix64 rng(derive_seed(seed, name));
  std::vector<uint16_t> out(count);
  for (auto& v : out) v = f64_to_bf16(center + rng.uniform(-spread, spread));
  return out;
}

size_t AttentionWeights::bytes() const noexcept {
  size_t b = q.bytes() + k.bytes() + v.bytes() + o.bytes() + gate.bytes();
  for (const auto* t : {&q_bias, &k_bias, &v_bias, &o_bias, &q_norm, &k_norm}) b += t->size() * 2;
  return b;
}

void AttentionWeights::validate(const AttentionConfig& c) const {
  const std::array<std::tuple<const QuantMatrix*, uint32_t, uint32_t>, 4> shapes{
      {{&q, c.q_width(), c.hidden_size}, {&k, c.kv_width(), c.hidden_size}, {&v, c.kv_width(), c.hidden_size},
       {&o, c.hidden_size, c.q_width()}}};
  for (const auto& [m, n, k_] : shapes) {
    if (m->n != n || m->k != k_ || m->batch != 1) {
      invalid(m->name + ": shape [" + std::to_string(m->n) + ", " + std::to_string(m->k) + "], expected [" +
              std::to_string(n) + ", " + std::to_string(k_) + "] (" + c.source + ")");
    }
    if (m->format != q.format) {
      invalid(m->name + " and " + q.name + " differ in weight format: the attention's projections run as one family");
    }
  }
  if (c.output_gate && (gate.n != c.q_width() || gate.k != c.hidden_size || gate.format != q.format)) {
    invalid(gate.name + ": the output gate must be [" + std::to_string(c.q_width()) + ", " + std::to_string(c.hidden_size) +
            "] in q's format (" + c.source + ")");
  }
  if (!c.output_gate && gate.n != 0) invalid(gate.name + ": the config declares no output gate");
  check_vector(q_bias, c.qkv_bias, c.q_width(), q.name + ".bias");
  check_vector(k_bias, c.qkv_bias, c.kv_width(), k.name + ".bias");
  check_vector(v_bias, c.qkv_bias, c.kv_width(), v.name + ".bias");
  check_vector(o_bias, c.o_bias, c.hidden_size, o.name + ".bias");
  check_vector(q_norm, c.qk_norm, c.head_dim, "q_norm.weight");
  check_vector(k_norm, c.qk_norm, c.head_dim, "k_norm.weight");
}

AttentionWeights read_attention_weights(const TensorSource& src, const std::string& prefix, const AttentionConfig& c,
                                        const CheckpointQuant& quant) {
  AttentionWeights w;
  if (c.output_gate) {
    split_gate(read_linear(src, prefix + "q_proj", 2 * c.q_width(), c.hidden_size, quant), c, w);
  } else {
    w.q = read_linear(src, prefix + "q_proj", c.q_width(), c.hidden_size, quant);
  }
  w.k = read_linear(src, prefix + "k_proj", c.kv_width(), c.hidden_size, quant);
  w.v = read_linear(src, prefix + "v_proj", c.kv_width(), c.hidden_size, quant);
  w.o = read_linear(src, prefix + "o_proj", c.hidden_size, c.q_width(), quant);
  // One family for the four: a W4A16 projection beside zero-point ones becomes w4-zp (exact).
  std::array<QuantMatrix*, 5> all{&w.q, &w.k, &w.v, &w.o, &w.gate};
  bool zero_points = false;
  for (const QuantMatrix* m : all) zero_points |= m->format == WeightFormat::w4_zp;
  for (QuantMatrix* m : all) {
    if (zero_points && m->n != 0 && m->format == WeightFormat::w4a16) *m = to_w4_zp(*m);
  }
  if (c.qkv_bias) {
    w.q_bias = read_bf16_tensor(src, prefix + "q_proj.bias", {c.q_width()});
    w.k_bias = read_bf16_tensor(src, prefix + "k_proj.bias", {c.kv_width()});
    w.v_bias = read_bf16_tensor(src, prefix + "v_proj.bias", {c.kv_width()});
  }
  if (c.o_bias) w.o_bias = read_bf16_tensor(src, prefix + "o_proj.bias", {c.hidden_size});
  if (c.qk_norm) {
    w.q_norm = read_bf16_tensor(src, prefix + "q_norm.weight", {c.head_dim});
    w.k_norm = read_bf16_tensor(src, prefix + "k_norm.weight", {c.head_dim});
  }
  w.validate(c);
  return w;
}

AttentionWeights synthetic_attention_weights(const AttentionConfig& c, uint64_t seed, WeightFormat format) {
  AttentionWeights w;
  w.q = synthetic_quant("self_attn.q_proj", format, c.q_width(), c.hidden_size, seed);
  w.k = synthetic_quant("self_attn.k_proj", format, c.kv_width(), c.hidden_size, seed);
  w.v = synthetic_quant("self_attn.v_proj", format, c.kv_width(), c.hidden_size, seed);
  w.o = synthetic_quant("self_attn.o_proj", format, c.hidden_size, c.q_width(), seed);
  if (c.output_gate) w.gate = synthetic_quant("self_attn.q_proj (gate rows)", format, c.q_width(), c.hidden_size, seed);
  if (c.qkv_bias) {
    w.q_bias = synthetic_bf16_values(seed, "q_bias", c.q_width(), 0.0, 0.1);
    w.k_bias = synthetic_bf16_values(seed, "k_bias", c.kv_width(), 0.0, 0.1);
    w.v_bias = synthetic_bf16_values(seed, "v_bias", c.kv_width(), 0.0, 0.1);
  }
  if (c.o_bias) w.o_bias = synthetic_bf16_values(seed, "o_bias", c.hidden_size, 0.0, 0.1);
  if (c.qk_norm) {
    const double center = c.zero_centred_norm ? 0.0 : 1.0;  // zero-centred weights are offsets from 1
    w.q_norm = synthetic_bf16_values(seed, "q_norm", c.head_dim, center, 0.2);
    w.k_norm = synthetic_bf16_values(seed, "k_norm", c.head_dim, center, 0.2);
  }
  return w;
}

}  // namespace metrale::layers
