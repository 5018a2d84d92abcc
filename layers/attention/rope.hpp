// SPDX-License-Identifier: MIT OR Apache-2.0
// The rotary embedding's host side: inv_freq [head_dim/2] (f32) and the attention scaling that
// rope/rope (docs/kernels.md) takes, from a checkpoint's config.json, as transformers'
// modeling_rope_utils computes them for rope_scaling types "default", "llama3" and "yarn". Any
// other rope_type is refused by name.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace metrale::layers {

struct RopeScaling {
  std::string type = "default";  // "default", "llama3", "yarn"
  double factor = 1.0;
  bool factor_given = false;  // yarn: absent, the ratio of the context lengths stands in
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 and yarn (yarn: absent means max_position_embeddings)
  std::optional<double> original_max_position_embeddings;
  // yarn
  std::optional<double> attention_factor;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
};

struct RopeConfig {
  double theta = 10000.0;  // rope_theta
  uint32_t head_dim = 0;   // the head's width
  uint32_t rotary_dim = 0; // the rotated width: int(head_dim * partial_rotary_factor), even (the whole head when 1)
  uint32_t max_position_embeddings = 0;
  RopeScaling scaling;
};

struct RopeParameters {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float attention_scaling = 1.0f;
};

// Reads rope_theta, head_dim (else hidden_size / num_attention_heads), max_position_embeddings
// and rope_scaling (its "rope_type", or the older "type"), and partial_rotary_factor (in
// rope_parameters or at the top level; `default_partial` when absent: the architecture's).
// Error(invalid_argument) for a malformed field, Refusal for a rope_type other than the three, a
// factor outside (0, 1] or one other than 1 with a rope_type other than default. Which
// architectures may rotate part of a head at all is the registry's to refuse.
RopeConfig parse_rope_config(const nlohmann::json& config, const std::string& source, double default_partial = 1.0);

RopeParameters rope_parameters(const RopeConfig& config);

}  // namespace metrale::layers
