// SPDX-License-Identifier: MIT OR Apache-2.0
// compressed-tensors as llm-compressor writes it (docs/checkpoint-formats.md): pack-quantized
// integers (weight_packed I32 [N, K*b/32] of code + 2^(b-1) packed along K, weight_scale,
// optional weight_zero_point, weight_shape), int-quantized integers (weight I8 [N, K] of signed
// values, 4-bit ones in [-8, 7]: W4A8; optional weight_zero_point I8 [N, G]) and
// float-quantized FP8 (weight F8_E4M3 [N, K]), with per-group, per-channel, per-tensor or block
// scales; an actorder "group" layer adds weight_g_idx I32 [K] (the group of each column).
#include "io/linear_reader.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <cstring>
#include <limits>

namespace metrale::layers {

namespace {

void check_weight_shape(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k) {
  const std::string name = prefix + ".weight_shape";
  if (!src.contains(name)) return;
  const auto raw = src.at(name).read_raw(name, {Dtype::i64, Dtype::i32}, std::nullopt);
  const bool wide = src.at(name).info(name).dtype == Dtype::i64;
  std::vector<int64_t> dims(raw.size() / (wide ? 8 : 4));
  for (size_t i = 0; i < dims.size(); ++i) {
    if (wide) {
      std::memcpy(&dims[i], raw.data() + 8 * i, 8);
    } else {
      int32_t v = 0;
      std::memcpy(&v, raw.data() + 4 * i, 4);
      dims[i] = v;
    }
  }
  if (dims != std::vector<int64_t>{n, k}) {
    std::string text;
    for (auto d : dims) text += (text.empty() ? "" : ", ") + std::to_string(d);
    throw Error(Status::invalid_argument, src.at(name).where(name) + "says the weight is [" + text + "], expected [" +
                                              std::to_string(n) + ", " + std::to_string(k) + "]");
  }
}

// Zero points of an asymmetric pack-quantized layer as the true zero z (value (u - z) * s, u the
// stored unsigned code): packed I32 [ceil(N/per_word), G] along N holding zp + 2^(b-1)
// (compressed-tensors 0.9.4 on), or unpacked signed I8 [N, G] holding zp (earlier versions).
std::function<uint32_t(uint32_t, uint32_t)> zero_points(const TensorSource& src, const std::string& prefix, uint32_t n,
                                                       uint32_t groups, const CheckpointQuant& q) {
  const uint32_t middle = 1u << (q.bits - 1);
  if (q.sym) return [middle](uint32_t, uint32_t) { return middle; };
  const std::string name = prefix + ".weight_zero_point";
  SafetensorsReader& r = src.at(name);
  if (r.info(name).dtype == Dtype::i8) {
    auto raw = std::make_shared<std::vector<std::byte>>(r.read_raw(name, {Dtype::i8}, std::vector<uint64_t>{n, groups}));
    return [raw, groups, middle](uint32_t row, uint32_t g) {
      return static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>((*raw)[size_t{row} * groups + g])) + static_cast<int32_t>(middle));
    };
  }
  const uint32_t per_word = 32 / q.bits, mask = (1u << q.bits) - 1;
  auto words = std::make_shared<std::vector<uint32_t>>(
      r.read_u32(name, {Dtype::i32, Dtype::u32}, {(n + uint64_t{per_word} - 1) / per_word, groups}));
  return [words, groups, per_word, mask, bits = q.bits](uint32_t row, uint32_t g) {
    return ((*words)[size_t{row / per_word} * groups + g] >> (bits * (row % per_word))) & mask;
  };
}

// The K permutation of an actorder "group" layer, from weight_g_idx I32 [K] (the group of each
// column, as GPTQModifier leaves it). A g_idx holding -1 was never filled in: compressed-tensors
// reads it as column order, and so does metrale.
std::vector<int32_t> read_g_idx(const TensorSource& src, const std::string& prefix, uint32_t k, const KernelGroups& g,
                                const CheckpointQuant& q) {
  const std::string name = prefix + ".weight_g_idx";
  if (!src.contains(name)) {
    if (q.desc_act) {
      throw Error(Status::not_found, src.description() + ": tensor '" + name + "': missing (weights.actorder = \"group\" "
                                     "stores the group of each column in weight_g_idx)");
    }
    return {};
  }
  const auto g_idx = src.at(name).read_u32(name, {Dtype::i32}, {k});
  if (std::find(g_idx.begin(), g_idx.end(), 0xFFFFFFFFu) != g_idx.end()) return {};
  const GroupOrder order{q.desc_act, "weights.actorder", "\"static\" / \"weight\" / null (groups in column order)"};
  return group_order(src.at(name).where(name), g_idx, g, order);
}

// The groups of a per-group or per-channel integer layer (one group over K per channel).
KernelGroups ct_kernel_groups(const std::string& prefix, uint32_t k, const CheckpointQuant& q) {
  return kernel_groups(prefix, q.strategy == ScaleStrategy::channel ? -1 : q.group_size, k);
}

// weight_scale [N, G], G = K / group (1 per channel); a [N, other] tensor contradicts the declared
// grouping.
std::vector<float> read_group_scales(const TensorSource& src, const std::string& sname, uint32_t n, uint32_t groups,
                                     const CheckpointQuant& q) {
  const auto& sshape = src.at(sname).info(sname).shape;
  if (sshape.size() == 2 && sshape[0] == n && sshape[1] != groups) {
    const bool channel = q.strategy == ScaleStrategy::channel;
    contradiction(src.at(sname).where(sname), channel ? "strategy" : "group_size",
                  channel ? "channel" : std::to_string(q.group_size), "it holds " + std::to_string(sshape[1]) + " groups");
  }
  return src.at(sname).read_f32(sname, {n, groups});
}

QuantMatrix read_packed(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k, const CheckpointQuant& q) {
  check_weight_shape(src, prefix, n, k);
  const KernelGroups g = ct_kernel_groups(prefix, k, q);
  const uint32_t groups = k / g.checkpoint, per_word = 32 / q.bits, mask = (1u << q.bits) - 1;
  const std::string wname = prefix + ".weight_packed", sname = prefix + ".weight_scale";
  SafetensorsReader& r = src.at(wname);
  const auto& wshape = r.info(wname).shape;
  if (wshape.size() == 2 && wshape[0] == n && wshape[1] != k / per_word) {
    contradiction(r.where(wname), "num_bits", std::to_string(q.bits),
                  "its shape " + shape_string(wshape) + " packs " + std::to_string(wshape[1] * 32 % k == 0 ? wshape[1] * 32 / k : 0) +
                      "-bit codes");
  }
  const auto packed = r.read_u32(wname, {Dtype::i32, Dtype::u32}, {n, k / per_word});
  const auto scales = read_group_scales(src, sname, n, groups, q);
  const auto zero = zero_points(src, prefix, n, groups, q);
  return build_zero_point_matrix(
      prefix, q.bits == 4 ? WeightFormat::w4_zp : WeightFormat::w8_zp, n, k, g, read_g_idx(src, prefix, k, g, q),
      [&](uint32_t row, uint32_t col) { return (packed[size_t{row} * (k / per_word) + col / per_word] >> (q.bits * (col % per_word))) & mask; },
      [&](uint32_t row, uint32_t group) { return scales[size_t{row} * groups + group]; }, zero);
}

// int-quantized: one signed value per int8, in [-2^(b-1), 2^(b-1) - 1]; W = (w - zp) * s with zp
// the signed weight_zero_point I8 [N, G] when asymmetric, else 0. Signed w becomes the unsigned
// code w + 2^(b-1) of the w4-zp / w8-zp layouts, its zero point zp + 2^(b-1).
QuantMatrix read_int(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k, const CheckpointQuant& q) {
  const std::string wname = prefix + ".weight", sname = prefix + ".weight_scale";
  const KernelGroups g = ct_kernel_groups(prefix, k, q);
  const uint32_t groups = k / g.checkpoint;
  const int32_t middle = 1 << (q.bits - 1);
  const auto raw = src.at(wname).read_raw(wname, {Dtype::i8}, std::vector<uint64_t>{n, k});
  const auto scales = read_group_scales(src, sname, n, groups, q);
  const auto zero = zero_points(src, prefix, n, groups, q);
  // Each value is read once, as it is converted; a 4-bit value outside [-8, 7] contradicts num_bits.
  const auto code = [&](uint32_t row, uint32_t col) {
    const int32_t value = static_cast<int8_t>(raw[size_t{row} * k + col]);
    if (value < -middle || value >= middle) {
      contradiction(src.at(wname).where(wname), "num_bits", std::to_string(q.bits),
                    "it holds " + std::to_string(value) + " at [" + std::to_string(row) + ", " + std::to_string(col) +
                        "], outside [" + std::to_string(-middle) + ", " + std::to_string(middle - 1) + "]");
    }
    return static_cast<uint32_t>(value + middle);
  };
  return build_zero_point_matrix(prefix, q.bits == 4 ? WeightFormat::w4_zp : WeightFormat::w8_zp, n, k, g,
                                 read_g_idx(src, prefix, k, g, q), code,
                                 [&](uint32_t row, uint32_t group) { return scales[size_t{row} * groups + group]; }, zero);
}

QuantMatrix read_fp8(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k, const CheckpointQuant& q) {
  const std::string wname = prefix + ".weight";
  const auto codes = src.at(wname).read_raw(wname, {Dtype::f8_e4m3}, std::vector<uint64_t>{n, k});
  const ScaleGrid grid = read_scale_grid(src, prefix + ".weight_scale", n, k, q.strategy);
  return build_fp8_matrix(prefix, n, k, codes, [&](uint32_t row, uint32_t g) { return grid.at(row, g); });
}

// A static activation scale: P.input_scale, one value ([1]) in the activations' dtype, as
// llm-compressor stores it. Another shape (a scale per channel) or dtype is refused, naming it.
float read_input_scale(const TensorSource& src, const std::string& prefix, const CheckpointQuant& q) {
  const std::string name = prefix + ".input_scale";
  if (!src.contains(name)) {
    throw Refusal(name + " is missing: " + q.field("config_groups") + " declares static activation scales (\"dynamic\": "
                  "false), which llm-compressor stores as each module's input_scale");
  }
  SafetensorsReader& file = src.at(name);
  const TensorInfo& info = file.info(name);
  if (info.elements() != 1) {
    contradiction(file.where(name), q.field("config_groups") + ": input_activations.strategy", "\"tensor\"",
                  "the tensor holds " + std::to_string(info.elements()) + " scales (static scales per tensor are one value)");
  }
  // The tool divides the bf16 activations by it in bf16 (compressed-tensors' _quantize): the
  // quantizers' bf16 arithmetic. Another dtype would promote the quotient.
  if (info.dtype != Dtype::bf16) {
    throw Refusal(file.where(name) + "stored as " + std::string(dtype_name(info.dtype)) + ": metrale runs static activation "
                  "scales stored as BF16, the dtype of the activations they divide (llm-compressor's for a bf16 model)");
  }
  const float scale = file.read_f32(name, info.shape)[0];
  if (!(scale > 0 && scale < std::numeric_limits<float>::infinity())) {
    throw Error(Status::invalid_argument, file.where(name) + "a static activation scale must be positive and finite, found " +
                                              std::to_string(scale));
  }
  return scale;
}

}  // namespace

QuantMatrix read_compressed_tensors_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                                           const CheckpointQuant& q) {
  QuantMatrix m;
  switch (q.scheme) {
    case WeightScheme::ct_pack_int: m = read_packed(src, prefix, n, k, q); break;
    case WeightScheme::ct_int: m = read_int(src, prefix, n, k, q); break;
    case WeightScheme::ct_fp8: m = read_fp8(src, prefix, n, k, q); break;
    default: throw Error(Status::internal, prefix + ": not a compressed-tensors scheme");
  }
  if (static_activation_scales(q.activations)) {
    m.input_scales = {read_input_scale(src, prefix, q)};
  }
  return m;
}

}  // namespace metrale::layers
