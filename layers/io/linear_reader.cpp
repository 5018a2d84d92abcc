// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/linear_reader.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>

namespace metrale::layers {

namespace {

// Quantized tensors of a layer read as unquantized: the declaration says otherwise than the files.
void refuse_quantized_tensors(const TensorSource& src, const std::string& prefix, const CheckpointQuant& quant) {
  for (const char* suffix : {".qweight", ".weight_packed", ".weight_scale", ".weight_scale_inv", ".scales"}) {
    const std::string name = prefix + suffix;
    if (!src.contains(name)) continue;
    if (quant.method == QuantMethod::none) {
      throw Refusal(src.at(name).where(name) + "a quantized tensor, but the checkpoint declares no quantization (no "
                    "quantization_config in " + quant.source + ", no quantize_config.json): metrale reads what a "
                    "checkpoint declares and never guesses a format from its tensors");
    }
    const char* field = quant.method == QuantMethod::compressed_tensors ? "ignore" : "modules_to_not_convert";
    throw Refusal(src.at(name).where(name) + "a quantized tensor, but " + quant.field(field) + " (" + quant.source +
                  ") leaves " + prefix + " unquantized");
  }
}

std::optional<Dtype> declared_dtype(const CheckpointQuant& quant) {
  if (quant.torch_dtype == "bfloat16") return Dtype::bf16;
  if (quant.torch_dtype == "float16") return Dtype::f16;
  return std::nullopt;
}

// `count` matrices [n][k] of BF16 or F16 values, one after another in `bytes`.
std::vector<QuantMatrix> float16_matrices(const std::string& name, Dtype dtype, uint32_t count, uint32_t n, uint32_t k,
                                          const std::vector<std::byte>& bytes) {
  std::vector<QuantMatrix> out;
  const size_t per = size_t{n} * k * 2;
  for (uint32_t e = 0; e < count; ++e) {
    // Two values per word, lowest k first: exactly the row-major little-endian bytes.
    QuantMatrix m = quant_zeros(count == 1 ? name : name + "[" + std::to_string(e) + "]",
                                dtype == Dtype::bf16 ? WeightFormat::bf16 : WeightFormat::f16, n, k);
    std::memcpy(m.qweight.data(), bytes.data() + e * per, per);
    out.push_back(std::move(m));
  }
  return out;
}

// The dtype of an unquantized weight tensor: BF16 or F16, and the declared torch_dtype if any.
Dtype float16_dtype(const SafetensorsReader& r, const std::string& name, const CheckpointQuant& quant) {
  const Dtype dtype = r.info(name).dtype;
  if (dtype != Dtype::bf16 && dtype != Dtype::f16) {
    throw Refusal(r.where(name) + "dtype " + std::string(dtype_name(dtype)) + ": metrale runs unquantized linear weights "
                  "in BF16 or F16 (a model saved in bfloat16 or float16)");
  }
  const std::optional<Dtype> declared = declared_dtype(quant);
  if (quant.method == QuantMethod::none && !quant.torch_dtype.empty() && declared != dtype) {
    contradiction(r.where(name), "torch_dtype (" + quant.source + ")", "\"" + quant.torch_dtype + "\"",
                  "the tensor is " + std::string(dtype_name(dtype)) +
                      (declared ? "" : " (metrale runs unquantized models declared bfloat16 or float16)"));
  }
  return dtype;
}

}  // namespace

QuantMatrix read_float16_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                                const CheckpointQuant& quant) {
  const std::string weight = prefix + ".weight";
  refuse_quantized_tensors(src, prefix, quant);
  SafetensorsReader& r = src.at(weight);
  const Dtype dtype = float16_dtype(r, weight, quant);
  const std::vector<std::byte> bytes = r.read_raw(weight, {dtype}, std::vector<uint64_t>{n, k});
  std::vector<QuantMatrix> one = float16_matrices(prefix, dtype, 1, n, k, bytes);
  return std::move(one.front());
}

QuantMatrix read_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                        const CheckpointQuant& quant) {
  if (quant.scheme == WeightScheme::none || quant.leaves_unquantized(prefix)) {
    return read_float16_linear(src, prefix, n, k, quant);
  }
  switch (quant.scheme) {
    case WeightScheme::gptq: return read_gptq_linear(src, prefix, n, k, quant);
    case WeightScheme::awq_gemm: return read_awq_linear(src, prefix, n, k, quant);
    case WeightScheme::ct_pack_int:
    case WeightScheme::ct_int:
    case WeightScheme::ct_fp8: return read_compressed_tensors_linear(src, prefix, n, k, quant);
    case WeightScheme::fp8_block: return read_fp8_linear(src, prefix, n, k, quant);
    case WeightScheme::none: break;
  }
  return read_float16_linear(src, prefix, n, k, quant);
}

std::vector<QuantMatrix> read_fused_experts(const TensorSource& src, const std::string& name, uint32_t experts, uint32_t n,
                                            uint32_t k, const CheckpointQuant& quant) {
  if (quant.scheme == WeightScheme::fp8_block) return read_fp8_fused_experts(src, name, experts, n, k);
  if (quant.scheme == WeightScheme::none) {  // transformers 5's unquantized save: [experts, n, k] in the model dtype
    SafetensorsReader& r = src.at(name);
    const Dtype dtype = float16_dtype(r, name, quant);
    return float16_matrices(name, dtype, experts, n, k, r.read_raw(name, {dtype}, std::vector<uint64_t>{experts, n, k}));
  }
  throw Refusal(src.at(name).where(name) + "fused expert tensors (all experts in one [E, N, K] tensor) are not supported "
                "under " + quant.summary() + " (" + quant.source + "): metrale reads fused experts as block FP8 "
                "(quant_method fp8) or unquantized, and every other format per expert (experts.<E>.<projection>)");
}

std::vector<float> read_float_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                                     const CheckpointQuant& quant) {
  const std::string weight = prefix + ".weight";
  if (src.contains(weight) || quant.scheme != WeightScheme::gptq || !src.contains(prefix + ".qweight")) {
    return src.at(weight).read_f32(weight, {n, k});
  }
  // GPTQModel 4.0-4.2 quantizes Qwen MoE routers: dequantize them with GPTQ's own formula.
  const QuantMatrix m = read_gptq_linear(src, prefix, n, k, quant);
  const QuantView v = m.view();
  std::vector<float> out(size_t{n} * k);
  std::vector<double> row(k);
  for (uint32_t r = 0; r < n; ++r) {
    v.dequantize_row(r, row);
    for (uint32_t c = 0; c < k; ++c) out[size_t{r} * k + v.input_column(c)] = static_cast<float>(row[c]);
  }
  return out;
}

KernelGroups kernel_groups(const std::string& where, int32_t group_size, uint32_t k) {
  const uint32_t checkpoint = group_size == -1 ? k : static_cast<uint32_t>(group_size);
  if (checkpoint == 0 || k % checkpoint != 0) {
    throw Refusal(where + ": quantization_config.group_size = " + std::to_string(group_size) +
                  " does not divide the layer's K = " + std::to_string(k));
  }
  return KernelGroups{checkpoint, checkpoint < 128 ? checkpoint : 128u};
}

void contradiction(const std::string& where, const std::string& field, const std::string& declared,
                   const std::string& found) {
  throw Refusal((where.ends_with(": ") ? where : where + ": ") + field + " = " + declared + ", but " + found);
}

std::vector<int32_t> act_order_permutation(const std::string& where, const std::vector<uint32_t>& g_idx, uint32_t group,
                                           uint32_t groups) {
  std::vector<uint32_t> members(groups, 0);
  for (uint32_t c = 0; c < g_idx.size(); ++c) {
    if (g_idx[c] >= groups) {
      throw Error(Status::invalid_argument, where + ": column " + std::to_string(c) + " is in group " +
                                                std::to_string(g_idx[c]) + ", but there are " + std::to_string(groups) +
                                                " groups");
    }
    ++members[g_idx[c]];
  }
  for (uint32_t g = 0; g < groups; ++g) {
    if (members[g] != group) {
      throw Error(Status::invalid_argument, where + ": group " + std::to_string(g) + " has " + std::to_string(members[g]) +
                                                " columns, expected group_size = " + std::to_string(group));
    }
  }
  std::vector<int32_t> perm(g_idx.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return g_idx[static_cast<size_t>(a)] < g_idx[static_cast<size_t>(b)]; });
  bool identity = true;
  for (size_t i = 0; i < perm.size() && identity; ++i) identity = perm[i] == static_cast<int32_t>(i);
  if (identity) perm.clear();
  return perm;
}

std::vector<int32_t> group_order(const std::string& where, const std::vector<uint32_t>& g_idx, const KernelGroups& g,
                                 const GroupOrder& order) {
  const uint32_t k = static_cast<uint32_t>(g_idx.size());
  uint32_t c = 0;
  while (c < k && g_idx[c] == c / g.checkpoint) ++c;
  if (c == k) return {};
  if (!order.act_order) {
    contradiction(where, order.field, order.declared,
                  "column " + std::to_string(c) + " is in group " + std::to_string(static_cast<int32_t>(g_idx[c])) + ", not " +
                      std::to_string(c / g.checkpoint) + " (an act-order g_idx)");
  }
  return act_order_permutation(where, g_idx, g.checkpoint, k / g.checkpoint);
}

}  // namespace metrale::layers
