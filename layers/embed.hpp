// SPDX-License-Identifier: MIT OR Apache-2.0
// The embedding shortcuts (docs/embedding.md): what a program linking the layers would otherwise
// write itself, as the CLI does — open the runtime with every lever declared and checked, take a
// checkpoint's declared activation tier as the default, and run one layer's FFN on host rows or on
// the caller's device buffers. The layer is composed by open_layer (compose.hpp), so a program
// gets what `metrale run` gets, METRALE_LOCK included: a build that differs from the lock is a
// Refusal naming each difference.
#pragma once

#include "compose.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "core/device_buffer.hpp"
#include "ffn/ffn.hpp"
#include "core/tier_request.hpp"
#include "io/weights.hpp"

#include <metrale/backend.hpp>
#include <metrale/registry.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace metrale::layers {

// Declares the layers' levers, checks every METRALE_* lever that is set (a Refusal naming the
// first bad value), scans the manifests (declaring their levers) and checks again, warns about
// unknown METRALE_* variables, then loads the plugins. Not thread-safe (Registry::scan, load).
Registry open_runtime(const DiscoveryOptions& options = {});

// The activation tier of a checkpoint's layer, in metrale run's order: `asked` ("bf16", "int8" or
// "fp8"; empty: none) is explicit, else METRALE_ACTIVATION_QUANTIZATION, else what the checkpoint
// declares, else bf16. Throws Refusal for an unknown tier name.
ActivationRequest checkpoint_activations(const LoadedCheckpoint& checkpoint, std::string_view asked = {});

// One layer's FFN on a backend it keeps alive (the Backend outlives the layer by construction).
// Like the layers it wraps it is not reentrant: one EmbeddedFfn per thread.
class EmbeddedFfn {
 public:
  // open_layer(*backend, request): the request's checkpoint (or synthetic weights), config and tiers.
  EmbeddedFfn(std::shared_ptr<Backend> backend, const LayerRequest& request);
  // The program's own weights: `config` is the layer's FFN config (LoadedCheckpoint::config, or
  // ModelConfig::for_layer of a model's); options.activations is the tier as asked.
  EmbeddedFfn(std::shared_ptr<Backend> backend, const ModelConfig& config, const FfnWeights& weights,
              const FfnBuildOptions& options = {});
  // The checkpoint's layer with its activation tier (checkpoint_activations(checkpoint, activations)).
  EmbeddedFfn(std::shared_ptr<Backend> backend, const LoadedCheckpoint& checkpoint, std::string_view activations = {});

  // y = FFN(x) for m rows of bf16 [m, hidden] on the host: upload, forward, copy back, wait.
  // Throws Error(invalid_argument) when m is 0 or x does not hold m * hidden values.
  std::vector<uint16_t> forward_host(std::span<const uint16_t> x, uint32_t m, uint64_t stream = 0);
  // y = FFN(x) from and into device memory of this backend (Backend::alloc or a DeviceBuffer, or a
  // range inside one: backends check copies against their own allocations), bf16 [m, hidden]
  // each; asynchronous on `stream` (synchronize before reading `out`). A None FFN copies x.
  void forward_into(DevicePtr x, uint32_t m, DevicePtr out, uint64_t stream = 0);

  FfnComponent& component() noexcept { return layer_.ffn; }
  const ModelConfig& config() const noexcept { return layer_.source.config; }
  Backend& backend() const noexcept { return *backend_; }
  // The audit rows the build appended (the lookups this layer made), in order.
  const std::vector<AuditRow>& build_audit() const noexcept { return layer_.audit; }

 private:
  EmbeddedFfn(std::shared_ptr<Backend> backend, LayerSource source, const LayerRequest& request);
  std::shared_ptr<Backend> backend_;  // declared first: destroyed after the layer and its buffers
  OpenedLayer layer_;
  DeviceBuffer x_;  // forward_host's input rows, grown to the largest m seen
};

}  // namespace metrale::layers
