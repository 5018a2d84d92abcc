// SPDX-License-Identifier: MIT OR Apache-2.0
// The Gated DeltaNet mixer of Qwen3.5 and Qwen3-Next (docs/layers.md, "The hybrid layer"), from a
// Hugging Face config.json: its heads, their widths and the convolution's length, as transformers'
// Qwen3NextGatedDeltaNet reads them, and the per-sequence state it keeps. A plain value.
#pragma once

#include "architectures/architecture.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace metrale::layers {

struct DeltaNetConfig {
  std::string source;        // config.json's path, for messages
  uint32_t hidden_size = 0;
  uint32_t k_heads = 0;      // linear_num_key_heads
  uint32_t v_heads = 0;      // linear_num_value_heads (a multiple of k_heads)
  uint32_t k_dim = 0;        // linear_key_head_dim
  uint32_t v_dim = 0;        // linear_value_head_dim
  uint32_t conv_kernel = 4;  // linear_conv_kernel_dim
  float rms_norm_eps = 1e-6f;
  DeltaNetProjections projections = DeltaNetProjections::separate;

  uint32_t key_width() const noexcept { return k_heads * k_dim; }
  uint32_t value_width() const noexcept { return v_heads * v_dim; }
  // The convolution's channels: q and k of every key head, then v of every value head.
  uint32_t conv_channels() const noexcept { return 2 * key_width() + value_width(); }
  // Per sequence, f32: the convolution window [conv_kernel - 1][channels], then S [v_heads][k_dim][v_dim].
  uint64_t conv_state_floats() const noexcept { return uint64_t{conv_kernel - 1} * conv_channels(); }
  uint64_t state_floats() const noexcept { return conv_state_floats() + uint64_t{v_heads} * k_dim * v_dim; }
  uint64_t state_bytes() const noexcept { return state_floats() * sizeof(float); }
};

// Reads the linear_* keys (transformers' defaults where absent: 16 key heads, 32 value heads of 128,
// a convolution of 4); `projections` is the layout the resolved architecture's spec says (the
// caller resolved it once). Error(invalid_argument) naming the
// key for a value the kernels do not take (docs/kernels.md, module deltanet): heads of 16..256,
// value heads a multiple of key heads, a convolution of 2..8.
DeltaNetConfig parse_deltanet_config(const nlohmann::json& doc, const std::string& source, DeltaNetProjections projections);

}  // namespace metrale::layers
