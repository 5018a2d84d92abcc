// SPDX-License-Identifier: MIT OR Apache-2.0
#include "linear/bias.hpp"

#include "core/launch_shape.hpp"
#include "core/lookup_notes.hpp"

#include <metrale/catalogue_signatures.h>

namespace metrale::layers {

namespace {
constexpr uint32_t kBiasAddBlock = 128;  // one block per row; bias_add takes any 1-D block (docs/kernels.md)
}

KernelHandle resolve_bias_add(Backend& backend, std::source_location site) {
  constexpr auto kSignature = catalogue::signature("norm", "bias_add");
  return backend.lookup("norm", "bias_add", plain_request(LookupKind::require, kSignature), site);
}

void add_bias(Backend& backend, KernelHandle bias_add, const DeviceBuffer& bias, DevicePtr rows, uint32_t m, uint32_t n,
              uint64_t stream) {
  if (bias.bytes() == 0) return;
  backend.launch(bias_add, launch_shape({m, 1, 1}, kBiasAddBlock, stream), rows, bias.ptr(), rows, m, n);
}

}  // namespace metrale::layers
