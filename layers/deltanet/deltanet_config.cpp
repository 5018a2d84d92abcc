// SPDX-License-Identifier: MIT OR Apache-2.0
#include "deltanet/deltanet_config.hpp"

#include "io/config_json.hpp"

#include <metrale/status.hpp>

namespace metrale::layers {

namespace {

using config_json::Object;

uint32_t within(const Object& root, const char* key, uint32_t fallback, uint32_t lo, uint32_t hi) {
  const uint32_t v = root.u32(key).value_or(fallback);
  if (v < lo || v > hi) root.malformed(key, std::to_string(lo) + " .. " + std::to_string(hi), root.find(key));
  return v;
}

}  // namespace

DeltaNetConfig parse_deltanet_config(const nlohmann::json& doc, const std::string& source, DeltaNetProjections projections) {
  const Object root(doc, source, "", "a JSON object (the model config)");
  DeltaNetConfig c;
  c.source = source;
  c.projections = projections;
  c.hidden_size = root.u32("hidden_size").value_or(0);
  c.k_heads = within(root, "linear_num_key_heads", 16, 1, 1024);
  c.v_heads = within(root, "linear_num_value_heads", 32, 1, 1024);
  c.k_dim = within(root, "linear_key_head_dim", 128, 16, 256);
  c.v_dim = within(root, "linear_value_head_dim", 128, 16, 256);
  c.conv_kernel = within(root, "linear_conv_kernel_dim", 4, 2, 8);
  if (c.v_heads % c.k_heads != 0) {
    throw Error(Status::invalid_argument, root.where("linear_num_value_heads") + " = " + std::to_string(c.v_heads) +
                                              " is not a multiple of linear_num_key_heads = " + std::to_string(c.k_heads));
  }
  if (const auto eps = root.number("rms_norm_eps")) c.rms_norm_eps = static_cast<float>(*eps);
  return c;
}

}  // namespace metrale::layers
