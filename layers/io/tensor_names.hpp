// SPDX-License-Identifier: MIT OR Apache-2.0
// Parsing checkpoint tensor names. Names come from files, so they are scanned as plain strings in
// time linear in their length — never with a regular expression, whose backtracking recursion a
// long enough name turns into a stack overflow.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace metrale::layers {

struct MlpLayerName {
  std::string_view prefix;        // up to and including ".mlp.": "model.layers.7.mlp."
  std::string_view layer_digits;  // "7"
  std::optional<uint32_t> layer;  // nullopt when the digits do not fit in 32 bits
};

// The decoder layer of a Hugging Face style FFN tensor name, "<anything>layers.<L>.mlp.<rest>",
// using the last "layers.<digits>.mlp." in the name; nullopt when there is none.
std::optional<MlpLayerName> mlp_layer_of(std::string_view name) noexcept;
// The same for any FFN block name: ".mlp." or Mixtral's ".block_sparse_moe." after the layer.
std::optional<MlpLayerName> ffn_layer_of(std::string_view name) noexcept;

}  // namespace metrale::layers
