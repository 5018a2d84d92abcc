// SPDX-License-Identifier: MIT OR Apache-2.0
// DenseFfnLayer: y = down( act(gate(x)) * up(x) ) on W4A16 weights, bf16 activations.
//   gate_up: one fused [2I, H] projection (gate rows [0, I), up rows [I, 2I)) -> bf16 [m, 2I]
//            (+ norm/bias_add when the FFN has biases: Llama's mlp_bias)
//   act:     act/silu_mul or act/gelu_mul per hidden_act                        -> bf16 [m, I]
//   down:    [H, I] projection (+ its bias)                                     -> bf16 [m, H]
// Kernels are resolved once in build(); forward() picks per m (projection.hpp). A layer owns
// scratch buffers sized for the largest m seen, so forward() is not reentrant; use one layer per
// thread. The Backend must outlive the layer.
#pragma once

#include "io/config.hpp"
#include "core/device_quant_matrix.hpp"
#include "linear/projection.hpp"
#include "linear/projection_set.hpp"
#include "io/weights.hpp"

#include <metrale/backend.hpp>

#include <source_location>
#include <string>
#include <vector>

namespace metrale::layers {

// What a dense FFN asks the backend for.
struct DenseFfnKernels {
  ProjectionSet projections;  // gate_up and down under the layer's tier (and the family's repack)
  KernelHandle act;           // act/silu_mul or act/gelu_mul, required
  KernelHandle bias_add;      // norm/bias_add when the FFN has biases, else not looked up
};

// How a dense FFN is asked to run: the weights' format (and whether they carry an act-order
// permutation) and the activation tier.
struct DenseFfnTier {
  WeightFormat format = kDefaultWeightFormat;
  bool act_order = false;
  ActivationRequest activations;
  bool biases = false;  // gate, up and down carry biases (norm/bias_add is required)
};

class DenseFfnLayer {
 public:
  // Resolves the kernels only (audit rows, no memory): what build() does first. Throws
  // Error(incompatible) when a projection kernel cannot read the layout the weights will be in.
  static DenseFfnKernels resolve(Backend& backend, const std::string& name, uint32_t hidden, uint32_t intermediate,
                                 Activation activation, std::string_view model_type, const DenseFfnTier& tier = {});
  // Resolves, then uploads `weights` (checked against hidden/intermediate) through the repack.
  static DenseFfnLayer build(Backend& backend, const std::string& name, const DenseFfnWeights& weights,
                             Activation activation, std::string_view model_type, const ActivationRequest& activations = {});
  static DenseFfnLayer build(Backend& backend, const ModelConfig& config, const DenseFfnWeights& weights,
                             const ActivationRequest& activations = {});

  // y = FFN(x) for m rows of bf16 [m, H]; returns the layer's output buffer (valid until the next
  // forward). The path is chosen by m: decode (1), batched decode (<= 8), prefill (more).
  DevicePtr forward(DevicePtr x, uint32_t m, uint64_t stream = 0);
  DevicePtr forward_decode(DevicePtr x, uint64_t stream = 0);                 // m == 1
  DevicePtr forward_batched(DevicePtr x, uint32_t m, uint64_t stream = 0);    // 1 <= m <= 8
  DevicePtr forward_prefill(DevicePtr x, uint32_t m, uint64_t stream = 0);    // any m >= 1
  // The same into caller memory (bf16 [m, H]).
  void forward_into(DevicePtr x, uint32_t m, DevicePtr out, uint64_t stream = 0);

  std::vector<PlanStep> plan(uint32_t m) const;
  const DenseFfnKernels& kernels() const noexcept { return kernels_; }
  uint32_t hidden() const noexcept { return hidden_; }
  uint32_t intermediate() const noexcept { return intermediate_; }
  Activation activation() const noexcept { return activation_; }
  // The activation tier the projections run under (after any fallback).
  ActivationQuant activations() const noexcept { return kernels_.projections.activations; }
  size_t weight_bytes() const noexcept;
  const std::string& name() const noexcept { return name_; }

 private:
  DenseFfnLayer() = default;
  Backend* backend_ = nullptr;
  std::string name_;
  uint32_t hidden_ = 0;
  uint32_t intermediate_ = 0;
  Activation activation_ = Activation::silu;
  DenseFfnKernels kernels_;
  DeviceQuantMatrix gate_up_;
  DeviceQuantMatrix down_;
  DeviceBuffer gate_up_bias_, down_bias_;  // empty without biases
  DeviceBuffer gate_up_out_;  // bf16 [m, 2I]
  DeviceBuffer act_out_;      // bf16 [m, I]
  DeviceBuffer out_;          // bf16 [m, H]
  ProjectionScratch scratch_; // gathered / quantized inputs
};

// act kernel launch shared by the dense and MoE layers: gate_up bf16 [m, 2I] -> out bf16 [m, I].
void launch_act(Backend& backend, KernelHandle act, DevicePtr gate_up, DevicePtr out, uint32_t m, uint32_t intermediate,
                uint64_t stream);
KernelHandle resolve_act(Backend& backend, Activation activation, std::source_location site);

}  // namespace metrale::layers
