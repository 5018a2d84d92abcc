// SPDX-License-Identifier: MIT OR Apache-2.0
// The projections of one layer (a dense FFN's gate_up and down, or a MoE's experts) under one
// quantization tier (docs/quantization.md): which kernel family runs them, resolved once at
// build with its audit rows into the family's linear plan (linear_plan.hpp), which every weight
// format implements.
//
// Tier choice: the weights' format is given (a checkpoint declares it, or synthetic weights were
// made in it). The activation tier is asked for explicitly (--activation-quantization or
// METRALE_ACTIVATION_QUANTIZATION), or by default (what the checkpoint declares, else bf16). A
// family the backend lacks is a Refusal (exit 3) naming the flag or lever, the kernel and the
// backend when the tier was explicit, and falls back to bf16 activations when it was a default.
// Every lookup carries the tier it is made under as annotations (audit.hpp): `tier`, pinned,
// "<activations>/<family module>" ("int8/w4a8"), and `tier_note`, the text of ProjectionSet::tier
// at that attempt. The rows of an attempt that fell back keep the tier they were made under.
#pragma once

#include "core/device_quant_matrix.hpp"
#include "core/tier_request.hpp"
#include "core/tiers.hpp"
#include "linear/family.hpp"
#include "linear/linear_plan.hpp"

#include <metrale/backend.hpp>

#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

namespace metrale::layers {

struct ProjectionSetRequest {
  std::string name;  // "ffn", "ffn.experts", "ffn.shared_expert": for messages and the audit
  WeightFormat format = kDefaultWeightFormat;
  bool act_order = false;
  bool grouped = false;         // MoE experts: try the family's grouped GEMM
  bool grouped_decode = false;  // MoE experts: try the cross-row grouped decode (fp8)
  std::vector<ProjectionShape> shapes;  // every projection of the set (the W4A16 chain needs them)
  std::string model_type;
  ActivationRequest activations;
};

struct ProjectionSet {
  ActivationQuant activations = ActivationQuant::bf16;
  std::shared_ptr<const LinearPlan> plan;  // non-null once resolved
  std::string tier;  // "w4a8: int8 activations (m/config.json)": the tier_note of its rows

  KernelFamily family() const noexcept { return plan->family(); }
  const FamilyKernels& kernels() const noexcept { return plan->kernels(); }
  bool act_order() const noexcept { return static_cast<bool>(kernels().gather); }
  // The weights on the device in the format and layout this set's kernels read: W4A16 weights
  // under int8 activations or with a permutation become w4-zp first (zero points 8, exact);
  // every other format loads as it is. Throws Error(invalid_argument) for weights of another
  // format than the set was resolved for.
  DeviceQuantMatrix upload(Backend& backend, const QuantMatrix& weights) const;
};

ProjectionSet resolve_projection_set(Backend& backend, const ProjectionSetRequest& request,
                                     std::source_location site = std::source_location::current());

// y[m, n] = x[m, k] W^T for matrix `index` of `weights` (the plan's run).
void run_projection(Backend& backend, const ProjectionSet& set, const DeviceQuantMatrix& weights, uint32_t index,
                    DevicePtr x, DevicePtr y, uint32_t m, ProjectionScratch& scratch, uint64_t stream);
// The grouped form over every expert: rows of x grouped by `offsets` (device), `rows` in all.
void run_grouped_projection(Backend& backend, const ProjectionSet& set, const DeviceQuantMatrix& weights, DevicePtr x,
                            DevicePtr offsets, DevicePtr y, uint32_t rows, ProjectionScratch& scratch, uint64_t stream);
// The plan step of one projection of the set for m rows.
PlanStep describe_set_projection(Backend& backend, const ProjectionSet& set, const std::string& step, uint32_t m,
                                 uint32_t n, uint32_t k);

}  // namespace metrale::layers
