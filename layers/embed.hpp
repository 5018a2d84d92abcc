// SPDX-License-Identifier: MIT OR Apache-2.0
// The embedding API (docs/embedding.md): what a program linking the installed layers writes
// instead of the CLI — open the runtime with every lever declared and checked, open one layer's
// FFN from a LayerRequest (a checkpoint, a file in the project's tensor names, or synthetic
// weights) and run it on host rows or on the caller's device buffers. The layer is composed as
// `metrale run` composes it (open_layer, inside the library), METRALE_LOCK included: a build that
// differs from the lock is a Refusal naming each difference.
//
// Installed, with the headers it includes: nothing here names the layers' internals, so they can
// change without changing a program's build (EmbeddedFfn keeps them behind a pointer).
#pragma once

#include "core/layer.hpp"
#include "layer_request.hpp"

#include <metrale/audit.hpp>
#include <metrale/backend.hpp>
#include <metrale/registry.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace metrale::layers {

// Declares the layers' levers, checks every METRALE_* lever that is set (a Refusal naming the
// first bad value), scans the manifests (declaring their levers) and checks again, warns about
// unknown METRALE_* variables, then loads the plugins. Not thread-safe (Registry::scan, load).
Registry open_runtime(const DiscoveryOptions& options = {});

// What a layer was opened from and the tiers it runs, as `metrale run` reports them.
struct LayerInfo {
  std::string model;           // the config's source: "preset small-dense" or a config.json's path
  std::string weights_source;  // the weights' path as given, or "synthetic (seed N)"
  std::optional<uint32_t> layer;  // a checkpoint's decoder layer
  std::string declared;        // what a checkpoint declares ("gptq v1, 4-bit int, group 128, symmetric"); empty: none
  std::string quantization;    // `metrale run`'s: the declaration, where and the layer; or the synthetic formats
  std::string activations;     // the activation tier: "bf16", "int8" or "fp8"
  // Why that tier: "default", the request's TierAsk ("activations int8"), the lever
  // ("METRALE_ACTIVATION_QUANTIZATION=int8") or the checkpoint's config.json.
  std::string activations_source;
  std::vector<std::string> tiers;  // each projection set's tier ("w4a8: int8 activations (...)"), in audit order
};

// One layer's FFN on a backend it keeps alive (the Backend outlives the layer by construction).
// Like the layers it wraps it is not reentrant: one EmbeddedFfn per thread (several may share a
// backend). Movable; a moved-from EmbeddedFfn may only be destroyed or assigned to.
class EmbeddedFfn {
 public:
  // Opens the request's layer on `backend`: reads each file once, resolves the config, the
  // formats and the tiers, builds it (one audit row per kernel lookup) and checks METRALE_LOCK.
  // Throws Error(invalid_argument) for a null backend, what reading or building throws (errors
  // name the file, the tensor or the field), and a Refusal for an explicit request the backend
  // cannot honour, a declaration the loaders do not support, or a difference from the lock.
  EmbeddedFfn(std::shared_ptr<Backend> backend, const LayerRequest& request);
  ~EmbeddedFfn();
  EmbeddedFfn(EmbeddedFfn&& other) noexcept;
  EmbeddedFfn& operator=(EmbeddedFfn&& other) noexcept;

  // y = FFN(x) for m rows of bf16 [m, hidden] on the host: upload, forward, copy back, wait.
  // Throws Error(invalid_argument) when m is 0 or x does not hold m * hidden values.
  std::vector<uint16_t> forward_host(std::span<const uint16_t> x, uint32_t m, uint64_t stream = 0);
  // y = FFN(x) from and into device memory of this backend (Backend::alloc or a DeviceBuffer, or a
  // range inside one: backends check copies against their own allocations), bf16 [m, hidden]
  // each; asynchronous on `stream` (synchronize before reading `out`). A None FFN copies x.
  void forward_into(DevicePtr x, uint32_t m, DevicePtr out, uint64_t stream = 0);
  // The launches a forward of m rows takes, in order (`metrale run`'s plan).
  std::vector<PlanStep> plan(uint32_t m) const;

  uint32_t hidden_size() const noexcept;
  const LayerInfo& info() const noexcept;
  Backend& backend() const noexcept;
  // The audit rows the build appended (the lookups this layer made), in order.
  const std::vector<AuditRow>& build_audit() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What EmbeddedModel::generate returns: per prompt, the new ids and the logits each was chosen
// from (bf16 values as f32, [new ids][vocab]), and the rates of the two phases.
struct Generation {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> logits;
  uint64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

// A whole decoder model (docs/layers.md, "The decoder") on a backend it keeps alive, composed as
// `metrale generate` composes it: request.weights a checkpoint (its config.json beside it), or
// without weights request.model a decoder preset or a config.json on synthetic weights. Not
// reentrant; movable like EmbeddedFfn.
class EmbeddedModel {
 public:
  // Throws as EmbeddedFfn's constructor does; a backend lacking a kernel the model needs is an
  // Error naming it, an explicit lever it cannot honour a Refusal.
  EmbeddedModel(std::shared_ptr<Backend> backend, const LayerRequest& request);
  ~EmbeddedModel();
  EmbeddedModel(EmbeddedModel&& other) noexcept;
  EmbeddedModel& operator=(EmbeddedModel&& other) noexcept;

  // Greedy decoding of every prompt (token ids), decoded together after each is prefilled, in a
  // KV cache made for the call (kv_tokens 0: the prompts plus max_new_tokens each). Throws
  // Error(invalid_argument) for an empty prompt or an id outside the vocabulary,
  // Error(out_of_memory) when the cache cannot hold them (naming the sizes).
  Generation generate(const std::vector<std::vector<int32_t>>& prompts, uint32_t max_new_tokens, uint64_t kv_tokens = 0);

  uint32_t vocab_size() const noexcept;
  Backend& backend() const noexcept;
  // The audit rows the build appended, in order.
  const std::vector<AuditRow>& build_audit() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace metrale::layers
