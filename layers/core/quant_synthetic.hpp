// SPDX-License-Identifier: MIT OR Apache-2.0
// Deterministic synthetic weights in every format (quant_matrix.hpp), straight from a seed, for
// `metrale run --check`, the conformance cases and the benchmarks: codes and zero points as a
// quantizer would leave them, scales chosen so that a dot product over K inputs of magnitude ~1
// stays ~1. Each tensor has its own stream (its seed mixed with the tensor's name).
#pragma once

#include "core/quant_matrix.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace metrale::layers {

struct SyntheticQuantOptions {
  uint32_t group = kW4a16GroupSize;  // zero-point formats: 32, 64 or 128
  bool symmetric = false;            // zero-point formats: every zero point at the middle code
  bool act_order = false;            // a random K permutation per matrix (as GPTQ's desc_act leaves)
};

// Synthetic weights of `format`.
QuantMatrix synthetic_quant(std::string name, WeightFormat format, uint32_t n, uint32_t k, uint64_t seed,
                            uint32_t batch = 1, const SyntheticQuantOptions& options = {});

// The weight tiers synthetic weights can be made in, by their command-line names: "int4" (the
// symmetric group-128 W4A16 format), "int4-zp", "int8" (8-bit codes with zero points), "fp8", and
// the unquantized "bf16" and "f16".
std::optional<WeightFormat> parse_weight_tier(std::string_view name) noexcept;
const char* weight_tier_name(WeightFormat format) noexcept;

}  // namespace metrale::layers
