// SPDX-License-Identifier: MIT OR Apache-2.0
// One linear layer of a real checkpoint (a module prefix P whose weight is [N, K]) read as its
// tool wrote it (docs/checkpoint-formats.md) and converted, exactly, into the canonical layout of
// the matching weight format (quant_matrix.hpp, docs/kernels.md):
//
//   GPTQ 4-bit, symmetric, group 128, no act-order, fp16 scales -> w4a16 (the W4A16 family)
//   other GPTQ 4-bit, AWQ GEMM, compressed-tensors pack-quantized int4 -> w4-zp
//   GPTQ 8-bit, compressed-tensors int8 (pack-quantized or int-quantized) -> w8-zp
//   block FP8, compressed-tensors float-quantized FP8 -> fp8-e4m3
//   unquantized (no quantization_config, or a module the declaration leaves unquantized):
//     P.weight BF16 / F16 [N, K] -> bf16-nk / f16-nk, the values as they are
//
// What the config declares rules: a tensor that contradicts it (a shape that implies other bits
// or groups, a zero point other than 8 under sym: true, a permuted g_idx without desc_act) is a
// Refusal naming the tensor, the field and both values. Groups of 32, 64 and 128 keep their size;
// larger groups and per-channel scales are stored by repeating each scale and zero over the
// 128-wide groups it covers, which is exact. An act-order g_idx becomes a K permutation (columns
// sorted by group) that the kernels apply to their inputs.
#pragma once

#include "io/quant_config.hpp"

#include "core/quant_matrix.hpp"
#include "io/tensor_source.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace metrale::layers {

// The quantized linear layer `prefix` ("model.layers.3.mlp.down_proj"), checked against [n, k].
QuantMatrix read_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                        const CheckpointQuant& quant);

// A layer the tools leave in float (a MoE router, Qwen2-MoE's shared_expert_gate) as f32 [n][k]:
// `prefix`.weight in F32/BF16/F16, or — as GPTQModel 4.0-4.2 writes Qwen MoE routers — GPTQ
// tensors, dequantized with GPTQ's own formula.
std::vector<float> read_float_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                                     const CheckpointQuant& quant);

// Every expert of a fused expert tensor `name` ([experts, n, k]: transformers 5's expert modules,
// <block>experts.gate_up_proj / down_proj) as one matrix each. Block FP8 (FineGrainedFP8: the
// tensor F8_E4M3 beside `name`_scale_inv [experts, ceil(n/128), ceil(k/128)]) and unquantized
// checkpoints (BF16 / F16) are read; any other scheme is a Refusal naming the tensor.
std::vector<QuantMatrix> read_fused_experts(const TensorSource& src, const std::string& name, uint32_t experts, uint32_t n,
                                            uint32_t k, const CheckpointQuant& quant);
std::vector<QuantMatrix> read_fp8_fused_experts(const TensorSource& src, const std::string& name, uint32_t experts,
                                                uint32_t n, uint32_t k);

// An unquantized layer: `prefix`.weight BF16 or F16 [n, k] (torch_dtype, when declared, must
// agree), as bf16-nk or f16-nk. Quantized tensors beside it are a Refusal: the declaration says
// the layer is not quantized.
QuantMatrix read_float16_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                                const CheckpointQuant& quant);

// The per-format readers read_linear dispatches to (one source file each).
QuantMatrix read_gptq_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                             const CheckpointQuant& quant);
QuantMatrix read_awq_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                            const CheckpointQuant& quant);
QuantMatrix read_compressed_tensors_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                                           const CheckpointQuant& quant);
QuantMatrix read_fp8_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                            const CheckpointQuant& quant);

// Shared by the readers ----------------------------------------------------------------------

// A checkpoint's groups along K and the kernel groups they are stored as.
struct KernelGroups {
  uint32_t checkpoint = 128;  // the checkpoint's group size (K when it has one group over K)
  uint32_t kernel = 128;      // 32, 64 or 128
};
// Throws Refusal naming `where` when K is not a multiple of the group size.
KernelGroups kernel_groups(const std::string& where, int32_t group_size, uint32_t k);

// A zero-point matrix (w4-zp or w8-zp) filled from the checkpoint: code(row, column) for the
// original columns, scale(row, group) and zero(row, group) per checkpoint group. With a
// permutation, stored column j holds original column perm[j] (whose group is j / checkpoint).
template <class Code, class Scale, class Zero>
QuantMatrix build_zero_point_matrix(std::string name, WeightFormat format, uint32_t n, uint32_t k, const KernelGroups& g,
                                    std::vector<int32_t> perm, Code code, Scale scale, Zero zero) {
  QuantMatrix m = quant_zeros(std::move(name), format, n, k, 1, g.kernel);
  const uint32_t bits = m.bits(), per_word = 32 / bits, words = k / per_word, groups = k / g.kernel;
  for (uint32_t row = 0; row < n; ++row) {
    for (uint32_t w = 0; w < words; ++w) {
      uint32_t word = 0;
      for (uint32_t i = 0; i < per_word; ++i) {
        const uint32_t col = w * per_word + i;
        word |= code(row, perm.empty() ? col : static_cast<uint32_t>(perm[col])) << (bits * i);
      }
      m.qweight[size_t{row} * words + w] = word;
    }
    for (uint32_t t = 0; t < groups; ++t) {
      const uint32_t group = t * g.kernel / g.checkpoint;
      m.scales32[size_t{row} * groups + t] = scale(row, group);
      m.zeros[size_t{row} * groups + t] = static_cast<uint8_t>(zero(row, group));
    }
  }
  m.perm = std::move(perm);
  return m;
}

// An fp8-e4m3 matrix from E4M3 bytes [n][k] and the scale of (row, 128-wide group).
QuantMatrix build_fp8_matrix(std::string name, uint32_t n, uint32_t k, const std::vector<std::byte>& codes,
                             const std::function<float(uint32_t row, uint32_t group)>& scale);

// The scale tensor of a per-channel ([n, 1]), per-tensor ([1] or [1, 1]) or 128x128-block
// ([ceil(n/128), ceil(k/128)]) scheme, read as f32 and indexed by (row, 128-wide group).
struct ScaleGrid {
  std::vector<float> values;
  uint32_t row_step = 1;    // rows per scale row: 1, 128, or n (per tensor)
  uint32_t group_step = 0;  // 128-wide groups per scale column; 0: one column
  uint32_t columns = 1;
  float at(uint32_t row, uint32_t group) const {
    return values[size_t{row / row_step} * columns + (group_step ? group / group_step : 0)];
  }
};
ScaleGrid read_scale_grid(const TensorSource& src, const std::string& name, uint32_t n, uint32_t k, ScaleStrategy strategy);

// "<tensor>: <field> = <declared>, but <what the tensor holds>": a declared-vs-tensor
// contradiction, a Refusal (exit 3).
[[noreturn]] void contradiction(const std::string& where, const std::string& field, const std::string& declared,
                                const std::string& found);

// The permutation that sorts K by group (stable), from a GPTQ-style g_idx; empty when g_idx is
// already sequential. Throws naming `where` unless every group has exactly `group` members.
std::vector<int32_t> act_order_permutation(const std::string& where, const std::vector<uint32_t>& g_idx, uint32_t group,
                                           uint32_t groups);

// What a checkpoint declares about the order of its groups, for a g_idx read beside the weights.
struct GroupOrder {
  bool act_order = false;  // a permuted g_idx is allowed (GPTQ desc_act, compressed-tensors actorder group)
  std::string field;       // the declaration, for a contradiction: "quantization_config.desc_act"
  std::string declared;    // its value: "false"
};
// The K permutation of a g_idx tensor (`where` names it) holding the group of each column: empty
// when sequential; a permutation only when `order.act_order`, otherwise a contradiction (Refusal)
// naming order.field. One reading for GPTQ's g_idx and compressed-tensors' weight_g_idx.
std::vector<int32_t> group_order(const std::string& where, const std::vector<uint32_t>& g_idx, const KernelGroups& g,
                                 const GroupOrder& order);

}  // namespace metrale::layers
