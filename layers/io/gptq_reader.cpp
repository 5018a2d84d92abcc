// SPDX-License-Identifier: MIT OR Apache-2.0
// GPTQ as AutoGPTQ and GPTQModel write it (docs/checkpoint-formats.md, "GPTQ"): qweight I32
// [K*b/32, N] packed along K, qzeros I32 [G, N*b/32] packed along N (v1: zero - 1, read by adding
// 0x11111111 / 0x01010101 to the whole word), scales [G, N] F16 or BF16, g_idx I32 [K].
#include "io/linear_reader.hpp"

#include "core/numeric.hpp"

#include <metrale/status.hpp>

#include <algorithm>

namespace metrale::layers {

namespace {

struct GptqTensors {
  uint32_t bits = 4, per_word = 8, mask = 0xf;
  uint32_t groups = 1;
  std::vector<uint32_t> qweight;  // [k / per_word][n]
  std::vector<float> scales;      // [groups][n]
  std::vector<uint16_t> scales_f16;  // raw F16 bits when the scales are F16
  std::vector<uint32_t> zeros;    // [groups][ceil(n / per_word)], true zeros (v1 adjusted); empty: none stored
  uint32_t zero_words = 0;
  std::vector<uint32_t> g_idx;    // [k]; empty: none stored

  uint32_t code(uint32_t n, uint32_t row, uint32_t col) const {
    return (qweight[size_t{col / per_word} * n + row] >> (bits * (col % per_word))) & mask;
  }
  uint32_t zero(uint32_t row, uint32_t group) const {
    if (zeros.empty()) return 1u << (bits - 1);
    return (zeros[size_t{group} * zero_words + row / per_word] >> (bits * (row % per_word))) & mask;
  }
};

// The bits a [rows, n] qweight of a K-column layer implies (for the contradiction message).
std::string implied_bits(uint64_t rows, uint32_t k) {
  return rows * 32 % k == 0 ? std::to_string(rows * 32 / k) + "-bit codes" : "no whole number of bits per code";
}

void read_codes(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k, const CheckpointQuant& q,
                GptqTensors& t) {
  const std::string name = prefix + ".qweight";
  SafetensorsReader& r = src.at(name);
  const auto& shape = r.info(name).shape;
  if (shape.size() == 2 && shape[1] == n && shape[0] != k / t.per_word) {
    contradiction(r.where(name), q.field("bits"), std::to_string(t.bits),
                  "its shape " + shape_string(shape) + " holds " + implied_bits(shape[0], k) + " for K = " + std::to_string(k));
  }
  t.qweight = r.read_u32(name, {Dtype::i32, Dtype::u32}, {k / t.per_word, n});
}

void read_scales(const TensorSource& src, const std::string& prefix, uint32_t n, const CheckpointQuant& q, GptqTensors& t) {
  const std::string name = prefix + ".scales";
  SafetensorsReader& r = src.at(name);
  const TensorInfo& info = r.info(name);
  if (info.shape.size() == 2 && info.shape[1] == n && info.shape[0] != t.groups) {
    contradiction(r.where(name), q.field("group_size"), std::to_string(q.group_size),
                  "it holds " + std::to_string(info.shape[0]) + " groups, where group_size " + std::to_string(q.group_size) +
                      " gives " + std::to_string(t.groups));
  }
  if (info.dtype == Dtype::f16) t.scales_f16 = r.read_u16(name, {Dtype::f16}, {t.groups, n});
  t.scales = r.read_f32(name, {t.groups, n});
}

void read_zeros(const TensorSource& src, const std::string& prefix, uint32_t n, const CheckpointQuant& q, GptqTensors& t) {
  const std::string name = prefix + ".qzeros";
  if (!src.contains(name)) {
    if (!q.sym) throw Error(Status::not_found, src.description() + ": tensor '" + name + "': missing (sym = false needs zero points)");
    return;
  }
  t.zero_words = (n + t.per_word - 1) / t.per_word;
  t.zeros = src.at(name).read_u32(name, {Dtype::i32, Dtype::u32}, {t.groups, t.zero_words});
  if (!q.gptq_v2) {
    // v1 stores zero - 1 per field; GPTQModel subtracts from the whole word (borrowing), so the
    // whole-word add recovers every field (docs/checkpoint-formats.md).
    const uint32_t one_per_field = t.bits == 4 ? 0x11111111u : 0x01010101u;
    for (auto& w : t.zeros) w += one_per_field;
  }
  if (!q.sym) return;
  const uint32_t middle = 1u << (t.bits - 1);
  for (uint32_t g = 0; g < t.groups; ++g)
    for (uint32_t row = 0; row < n; ++row)
      if (t.zero(row, g) != middle) {
        contradiction(src.at(name).where(name), q.field("sym"), "true (every zero point " + std::to_string(middle) + ")",
                      "group " + std::to_string(g) + " of output " + std::to_string(row) + " has zero point " +
                          std::to_string(t.zero(row, g)) + (q.gptq_v2 ? "" : " (v1: stored value + 1)"));
      }
}

// The act-order permutation g_idx describes, after checking it against desc_act.
std::vector<int32_t> read_order(const TensorSource& src, const std::string& prefix, uint32_t k, const CheckpointQuant& q,
                                const KernelGroups& g, GptqTensors& t) {
  const std::string name = prefix + ".g_idx";
  const bool act_order = q.desc_act && !q.static_groups;
  if (!src.contains(name)) {
    if (act_order) throw Error(Status::not_found, src.description() + ": tensor '" + name + "': missing (desc_act = true needs g_idx)");
    return {};
  }
  t.g_idx = src.at(name).read_u32(name, {Dtype::i32}, {k});
  const GroupOrder order{act_order, q.field(q.desc_act ? "static_groups" : "desc_act"),
                         q.desc_act ? "true (groups in column order)" : "false"};
  return group_order(src.at(name).where(name), t.g_idx, g, order);
}

void check_bias(const TensorSource& src, const std::string& prefix, uint32_t n) {
  const std::string name = prefix + ".bias";
  if (!src.contains(name)) return;
  const auto bias = src.at(name).read_f32(name, {n});
  if (std::any_of(bias.begin(), bias.end(), [](float v) { return v != 0.0f; })) {
    throw Refusal(src.at(name).where(name) + "a non-zero bias: metrale's FFN projections have none");
  }
}

// Symmetric 4-bit group 128 without act-order and with fp16 scales is exactly the W4A16 format.
QuantMatrix build_w4a16(const std::string& prefix, uint32_t n, uint32_t k, const GptqTensors& t) {
  QuantMatrix m = quant_zeros(prefix, WeightFormat::w4a16, n, k);
  const uint32_t words = k / 8, groups = k / 128;
  for (uint32_t w = 0; w < words; ++w)
    for (uint32_t row = 0; row < n; ++row) m.qweight[size_t{row} * words + w] = t.qweight[size_t{w} * n + row];
  for (uint32_t g = 0; g < groups; ++g)
    for (uint32_t row = 0; row < n; ++row) m.scales[size_t{row} * groups + g] = t.scales_f16[size_t{g} * n + row];
  return m;
}

}  // namespace

QuantMatrix read_gptq_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                             const CheckpointQuant& q) {
  GptqTensors t;
  t.bits = q.bits;
  t.per_word = 32 / q.bits;
  t.mask = (1u << q.bits) - 1;
  const KernelGroups g = kernel_groups(prefix, q.group_size, k);
  t.groups = k / g.checkpoint;
  read_codes(src, prefix, n, k, q, t);
  read_scales(src, prefix, n, q, t);
  read_zeros(src, prefix, n, q, t);
  std::vector<int32_t> perm = read_order(src, prefix, k, q, g, t);
  check_bias(src, prefix, n);
  if (q.bits == 4 && q.sym && g.checkpoint == 128 && perm.empty() && !t.scales_f16.empty()) {
    return build_w4a16(prefix, n, k, t);
  }
  return build_zero_point_matrix(
      prefix, q.bits == 4 ? WeightFormat::w4_zp : WeightFormat::w8_zp, n, k, g, std::move(perm),
      [&](uint32_t row, uint32_t col) { return t.code(n, row, col); },
      [&](uint32_t row, uint32_t group) { return t.scales[size_t{group} * n + row]; },
      [&](uint32_t row, uint32_t group) { return t.zero(row, group); });
}

}  // namespace metrale::layers
