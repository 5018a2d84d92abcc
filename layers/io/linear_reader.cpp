// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/linear_reader.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <numeric>

namespace metrale::layers {

QuantMatrix read_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                        const CheckpointQuant& quant) {
  switch (quant.scheme) {
    case WeightScheme::gptq: return read_gptq_linear(src, prefix, n, k, quant);
    case WeightScheme::awq_gemm: return read_awq_linear(src, prefix, n, k, quant);
    case WeightScheme::ct_pack_int:
    case WeightScheme::ct_int:
    case WeightScheme::ct_fp8: return read_compressed_tensors_linear(src, prefix, n, k, quant);
    case WeightScheme::fp8_block: return read_fp8_linear(src, prefix, n, k, quant);
    case WeightScheme::none: break;
  }
  throw Refusal(quant.source + ": the checkpoint declares no quantization (no quantization_config); metrale runs "
                "quantized weights (GPTQ, AWQ, compressed-tensors, FP8) or its own W4A16 files");
}

std::vector<QuantMatrix> read_fused_experts(const TensorSource& src, const std::string& name, uint32_t experts, uint32_t n,
                                            uint32_t k, const CheckpointQuant& quant) {
  if (quant.scheme == WeightScheme::fp8_block) return read_fp8_fused_experts(src, name, experts, n, k);
  throw Refusal(src.at(name).where(name) + "fused expert tensors (all experts in one [E, N, K] tensor) are not supported "
                "under " + quant.summary() + " (" + quant.source + "): metrale reads fused experts as block FP8 "
                "(quant_method fp8) and every other format per expert (experts.<E>.<projection>)");
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
