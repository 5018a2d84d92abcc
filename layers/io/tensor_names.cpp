// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/tensor_names.hpp"

#include <charconv>

namespace metrale::layers {

namespace {

std::optional<MlpLayerName> block_layer_of(std::string_view name, std::string_view kMlp) noexcept {
  constexpr std::string_view kLayers = "layers.";
  // From the last "layers." backwards; each digit run is scanned once (runs do not overlap).
  for (size_t at = name.rfind(kLayers); at != std::string_view::npos; at = at == 0 ? std::string_view::npos : name.rfind(kLayers, at - 1)) {
    const size_t digits = at + kLayers.size();
    size_t end = digits;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end == digits || name.substr(end, kMlp.size()) != kMlp) continue;
    MlpLayerName out{name.substr(0, end + kMlp.size()), name.substr(digits, end - digits), std::nullopt};
    uint32_t layer = 0;
    const auto [ptr, ec] = std::from_chars(name.data() + digits, name.data() + end, layer);
    if (ec == std::errc() && ptr == name.data() + end) out.layer = layer;
    return out;
  }
  return std::nullopt;
}

}  // namespace

std::optional<MlpLayerName> mlp_layer_of(std::string_view name) noexcept { return block_layer_of(name, ".mlp."); }

std::optional<MlpLayerName> ffn_layer_of(std::string_view name) noexcept {
  if (auto mlp = mlp_layer_of(name)) return mlp;
  return block_layer_of(name, ".block_sparse_moe.");
}

}  // namespace metrale::layers
