// SPDX-License-Identifier: MIT OR Apache-2.0
// One decoder layer's self-attention weights, host side: the q, k, v and o projections in the
// checkpoint's weight format (read by io/linear_reader.hpp, as every tool writes them), their
// biases and Qwen3's q/k norm weights in bf16. Synthetic weights (seeded) for presets and benches.
#pragma once

#include "attention/attention_config.hpp"

#include "core/quant_matrix.hpp"
#include "io/quant_config.hpp"
#include "io/tensor_source.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace metrale::layers {

struct AttentionWeights {
  QuantMatrix q, k, v;  // [q_width, hidden], [kv_width, hidden], [kv_width, hidden]
  QuantMatrix o;        // [hidden, q_width]
  QuantMatrix gate;     // [q_width, hidden]: the output gate's rows of q_proj (config.output_gate), else empty
  // bf16; empty when the model has none.
  std::vector<uint16_t> q_bias, k_bias, v_bias, o_bias;
  std::vector<uint16_t> q_norm, k_norm;  // [head_dim]

  WeightFormat format() const noexcept { return q.format; }
  bool act_order() const noexcept { return !q.perm.empty() || !k.perm.empty() || !v.perm.empty() || !o.perm.empty(); }
  size_t bytes() const noexcept;
  // Shapes and presence agree with `config`, the four projections share one format; throws
  // Error(invalid_argument) naming the tensor otherwise.
  void validate(const AttentionConfig& config) const;
};

// `prefix` is the layer's attention module ("model.layers.3.self_attn."). With an output gate,
// q_proj's rows (per head [q_h ; gate_h]) are split into q and gate. Projections in the
// format `quant` declares (a projection the declaration leaves unquantized in bf16/f16; a W4A16
// projection beside zero-point ones widened to w4-zp, exactly, so all four share one family).
AttentionWeights read_attention_weights(const TensorSource& src, const std::string& prefix, const AttentionConfig& config,
                                        const CheckpointQuant& quant);

// `count` seeded bf16 values uniform in center ± spread, the stream named `name` (norm weights,
// biases, embeddings of synthetic models).
std::vector<uint16_t> synthetic_bf16_values(uint64_t seed, const std::string& name, size_t count, double center, double spread);

// Seeded weights of `format` (biases and norm weights near 1 and 0 as trained models have them).
AttentionWeights synthetic_attention_weights(const AttentionConfig& config, uint64_t seed, WeightFormat format);

}  // namespace metrale::layers
