// SPDX-License-Identifier: MIT OR Apache-2.0
#include "deltanet/deltanet_weights.hpp"

#include "core/numeric.hpp"
#include "core/quant_synthetic.hpp"
#include "core/rng.hpp"
#include "io/linear_reader.hpp"

#include <metrale/status.hpp>

#include <array>
#include <cmath>
#include <tuple>

namespace metrale::layers {

namespace {

void invalid(const std::string& what) { throw Error(Status::invalid_argument, what); }

// rows [first, first + count) appended to `rows`.
void span_rows(std::vector<uint32_t>& rows, uint32_t first, uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) rows.push_back(first + i);
}

// Qwen3-Next's in_proj_qkvz [2 key_width + 2 value_width, hidden], per key head i
// [q_i ; k_i ; v and z of its value heads], and in_proj_ba [2 v_heads, hidden], per key head
// [b_i ; a_i]: the flat qkv, z, a and b projections (transformers' fix_query_key_value_ordering).
void ungroup(const QuantMatrix& qkvz, const QuantMatrix& ba, const DeltaNetConfig& c, DeltaNetWeights& w) {
  const uint32_t per = c.v_heads / c.k_heads, vz = per * c.v_dim, group = 2 * c.k_dim + 2 * vz;
  std::vector<uint32_t> q, k, v, z, b, a;
  for (uint32_t i = 0; i < c.k_heads; ++i) {
    span_rows(q, i * group, c.k_dim);
    span_rows(k, i * group + c.k_dim, c.k_dim);
    span_rows(v, i * group + 2 * c.k_dim, vz);
    span_rows(z, i * group + 2 * c.k_dim + vz, vz);
    span_rows(b, i * 2 * per, per);
    span_rows(a, i * 2 * per + per, per);
  }
  std::vector<uint32_t> qkv = q;
  qkv.insert(qkv.end(), k.begin(), k.end());
  qkv.insert(qkv.end(), v.begin(), v.end());
  w.qkv = select_rows(qkvz.name + " (q, k, v rows)", qkvz, qkv);
  w.z = select_rows(qkvz.name + " (z rows)", qkvz, z);
  w.b = select_rows(ba.name + " (b rows)", ba, b);
  w.a = select_rows(ba.name + " (a rows)", ba, a);
}

}  // namespace

size_t DeltaNetWeights::bytes() const noexcept {
  return qkv.bytes() + z.bytes() + a.bytes() + b.bytes() + out.bytes() + conv.size() * 2 +
         (a_log.size() + dt_bias.size() + norm.size()) * 4;
}

void DeltaNetWeights::validate(const DeltaNetConfig& c) const {
  const std::array<std::tuple<const QuantMatrix*, uint32_t, uint32_t>, 5> shapes{
      {{&qkv, c.conv_channels(), c.hidden_size}, {&z, c.value_width(), c.hidden_size}, {&a, c.v_heads, c.hidden_size},
       {&b, c.v_heads, c.hidden_size}, {&out, c.hidden_size, c.value_width()}}};
  for (const auto& [m, n, k] : shapes) {
    if (m->n != n || m->k != k || m->batch != 1) {
      invalid(m->name + ": shape [" + std::to_string(m->n) + ", " + std::to_string(m->k) + "], expected [" + std::to_string(n) +
              ", " + std::to_string(k) + "] (" + c.source + ")");
    }
    const QuantMatrix& family = (m == &a || m == &b) ? a : qkv;
    if (m->format != family.format) {
      invalid(m->name + " and " + family.name + " differ in weight format: " +
              (&family == &a ? "in_proj_a and in_proj_b" : "in_proj_qkv, in_proj_z and out_proj") + " run as one family");
    }
  }
  const auto check_size = [&](const char* tensor, size_t got, size_t want, const char* what) {
    if (got != want) {
      invalid(std::string(tensor) + ": " + std::to_string(got) + " values, expected " + std::to_string(want) + " (" + what +
              ", " + c.source + ")");
    }
  };
  check_size("conv1d.weight", conv.size(), size_t{c.conv_channels()} * c.conv_kernel,
             "linear_conv_kernel_dim per channel of q, k and v");
  check_size("A_log", a_log.size(), c.v_heads, "one per value head: linear_num_value_heads");
  check_size("dt_bias", dt_bias.size(), c.v_heads, "one per value head: linear_num_value_heads");
  check_size("norm.weight", norm.size(), c.v_dim, "linear_value_head_dim");
}

DeltaNetWeights read_deltanet_weights(const TensorSource& src, const std::string& prefix, const DeltaNetConfig& c,
                                      const CheckpointQuant& quant) {
  DeltaNetWeights w;
  const uint32_t h = c.hidden_size;
  if (c.projections == DeltaNetProjections::grouped_per_key_head) {
    ungroup(read_linear(src, prefix + "in_proj_qkvz", 2 * c.key_width() + 2 * c.value_width(), h, quant),
            read_linear(src, prefix + "in_proj_ba", 2 * c.v_heads, h, quant), c, w);
  } else {
    w.qkv = read_linear(src, prefix + "in_proj_qkv", c.conv_channels(), h, quant);
    w.z = read_linear(src, prefix + "in_proj_z", c.value_width(), h, quant);
    w.a = read_linear(src, prefix + "in_proj_a", c.v_heads, h, quant);
    w.b = read_linear(src, prefix + "in_proj_b", c.v_heads, h, quant);
  }
  w.out = read_linear(src, prefix + "out_proj", h, c.value_width(), quant);
  // One family for the five: a W4A16 projection beside zero-point ones becomes w4-zp (exact).
  const std::array<QuantMatrix*, 5> all{&w.qkv, &w.z, &w.a, &w.b, &w.out};
  bool zero_points = false;
  for (const QuantMatrix* m : all) zero_points |= m->format == WeightFormat::w4_zp;
  for (QuantMatrix* m : all)
    if (zero_points && m->format == WeightFormat::w4a16) *m = to_w4_zp(*m);
  w.conv = read_bf16_tensor(src, prefix + "conv1d.weight", {c.conv_channels(), 1, c.conv_kernel});
  w.a_log = read_f32_tensor(src, prefix + "A_log", {c.v_heads});
  w.dt_bias = read_f32_tensor(src, prefix + "dt_bias", {c.v_heads});
  w.norm = read_f32_tensor(src, prefix + "norm.weight", {c.v_dim});
  w.validate(c);
  return w;
}

DeltaNetWeights synthetic_deltanet_weights(const DeltaNetConfig& c, uint64_t seed, WeightFormat format) {
  DeltaNetWeights w;
  const uint32_t h = c.hidden_size;
  w.qkv = synthetic_quant("linear_attn.in_proj_qkv", format, c.conv_channels(), h, seed);
  w.z = synthetic_quant("linear_attn.in_proj_z", format, c.value_width(), h, seed);
  w.a = synthetic_quant("linear_attn.in_proj_a", format, c.v_heads, h, seed);
  w.b = synthetic_quant("linear_attn.in_proj_b", format, c.v_heads, h, seed);
  w.out = synthetic_quant("linear_attn.out_proj", format, h, c.value_width(), seed);
  SplitMix64 rng(derive_seed(seed, "linear_attn"));
  w.conv.resize(size_t{c.conv_channels()} * c.conv_kernel);
  for (auto& v : w.conv) v = f64_to_bf16(rng.uniform(-0.5, 0.5));
  for (uint32_t i = 0; i < c.v_heads; ++i) {
    w.a_log.push_back(static_cast<float>(std::log(rng.uniform(0.5, 16.0))));
    w.dt_bias.push_back(static_cast<float>(rng.uniform(-1.0, 1.0)));
  }
  for (uint32_t i = 0; i < c.v_dim; ++i) w.norm.push_back(static_cast<float>(rng.uniform(0.8, 1.2)));
  return w;
}

}  // namespace metrale::layers
