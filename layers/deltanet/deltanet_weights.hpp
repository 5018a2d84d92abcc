// SPDX-License-Identifier: MIT OR Apache-2.0
// One Gated DeltaNet layer's weights, host side, in the layout the deltanet kernels read whatever
// the checkpoint's: Qwen3-Next's in_proj_qkvz and in_proj_ba (grouped per key head) are taken
// apart into Qwen3.5's in_proj_qkv (q of every key head, then k, then v), in_proj_z, in_proj_a and
// in_proj_b at load, rows reordered only. Projections in the checkpoint's declared format;
// the convolution bf16, A_log, dt_bias and the gated norm's weight f32 (as stored, or widened).
// in_proj_qkv, in_proj_z and out_proj share one format; in_proj_a and in_proj_b share one, which
// may be another: the publishers' block FP8 and llm-compressor's recipes leave a and b in bf16
// beside quantized projections (DeltaNetLayer then runs them as their own projection set).
#pragma once

#include "deltanet/deltanet_config.hpp"

#include "core/quant_matrix.hpp"
#include "io/quant_config.hpp"
#include "io/tensor_source.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace metrale::layers {

struct DeltaNetWeights {
  QuantMatrix qkv;               // [conv_channels, hidden]
  QuantMatrix z;                 // [value_width, hidden]
  QuantMatrix a, b;              // [v_heads, hidden]
  QuantMatrix out;               // [hidden, value_width]
  std::vector<uint16_t> conv;    // bf16 [conv_channels][conv_kernel]
  std::vector<float> a_log, dt_bias;  // [v_heads]
  std::vector<float> norm;       // [v_dim]

  WeightFormat format() const noexcept { return qkv.format; }     // in_proj_qkv, in_proj_z, out_proj
  WeightFormat ab_format() const noexcept { return a.format; }   // in_proj_a, in_proj_b
  bool separate_ab() const noexcept { return a.format != qkv.format; }
  // Act-order in qkv, z or out (and a or b, when they share the format); in a or b.
  bool act_order() const noexcept {
    return !qkv.perm.empty() || !z.perm.empty() || !out.perm.empty() || (!separate_ab() && ab_act_order());
  }
  bool ab_act_order() const noexcept { return !a.perm.empty() || !b.perm.empty(); }
  size_t bytes() const noexcept;
  // Shapes agree with `config`; Error(invalid_argument) naming the tensor otherwise.
  void validate(const DeltaNetConfig& config) const;
};

// `prefix` is the layer's mixer ("model.layers.0.linear_attn.").
DeltaNetWeights read_deltanet_weights(const TensorSource& src, const std::string& prefix, const DeltaNetConfig& config,
                                      const CheckpointQuant& quant);
// Seeded weights of `format` (decays and norms in the ranges trained models have).
DeltaNetWeights synthetic_deltanet_weights(const DeltaNetConfig& config, uint64_t seed, WeightFormat format);

}  // namespace metrale::layers
