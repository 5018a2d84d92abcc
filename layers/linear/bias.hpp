// SPDX-License-Identifier: MIT OR Apache-2.0
// A linear layer's bias: bf16 rows [m, n] += bias [n], in place, by norm/bias_add. One helper for
// every layer whose projections carry biases (attention's q/k/v/o, the dense FFN's gate/up/down):
// the projection kernels compute x·Wᵀ only.
#pragma once

#include "core/device_buffer.hpp"

#include <metrale/backend.hpp>

#include <cstdint>
#include <source_location>

namespace metrale::layers {

// norm/bias_add, required (a layer asks only when it has a bias to add); the audit row names `site`.
KernelHandle resolve_bias_add(Backend& backend, std::source_location site = std::source_location::current());

// rows += bias on `stream`; nothing when `bias` is empty (that projection has no bias).
void add_bias(Backend& backend, KernelHandle bias_add, const DeviceBuffer& bias, DevicePtr rows, uint32_t m, uint32_t n,
              uint64_t stream);

}  // namespace metrale::layers
