// SPDX-License-Identifier: MIT OR Apache-2.0
// The projections of one layer (a dense FFN's gate_up and down, or a MoE's experts) under one
// quantization tier (docs/quantization.md): which kernel family runs them, resolved once at
// build with its audit rows, and how a launch prepares its inputs (act-order gather, int8/fp8
// activation quantization) before the family's GEMV/GEMM.
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
#include "linear/family.hpp"
#include "linear/projection.hpp"
#include "core/tier_request.hpp"
#include "core/tiers.hpp"

#include <metrale/backend.hpp>

#include <optional>
#include <source_location>
#include <string>
#include <vector>

namespace metrale::layers {

struct ProjectionSetRequest {
  std::string name;  // "ffn", "ffn.experts", "ffn.shared_expert": for messages and the audit
  WeightFormat format = WeightFormat::w4a16;
  bool act_order = false;
  bool grouped = false;         // MoE experts: try the family's grouped GEMM
  bool grouped_decode = false;  // MoE experts: try the cross-row grouped decode (fp8)
  std::vector<ProjectionShape> shapes;  // every projection of the set (the W4A16 chain needs them)
  std::string model_type;
  ActivationRequest activations;
};

struct ProjectionSet {
  KernelFamily family = KernelFamily::w4a16;
  ActivationQuant activations = ActivationQuant::bf16;
  ProjectionKernels w4a16;  // family w4a16: the section-7 chain
  FamilyKernels quant;      // any other family
  KernelHandle repack;      // the family's repack; null: the weights stay canonical
  std::string layout;       // the layout the weights will be in
  std::string tier;         // "w4a8: int8 activations (m/config.json)": the tier_note of its rows

  bool act_order() const noexcept { return static_cast<bool>(quant.gather); }
  // The weights as this set's kernels read them: W4A16 weights under int8 activations become
  // w4-zp (zero points 8), everything else passes through.
  QuantMatrix prepare(const QuantMatrix& weights) const;
  DeviceQuantMatrix upload(Backend& backend, const QuantMatrix& weights) const;
};

ProjectionSet resolve_projection_set(Backend& backend, const ProjectionSetRequest& request,
                                     std::source_location site = std::source_location::current());

// Scratch a layer keeps for its projections' input preparation, grown to the largest use.
struct ProjectionScratch {
  DeviceBuffer gathered;  // bf16 [rows][k]: act-order inputs
  DeviceBuffer quantized; // 1 byte per value: int8/fp8 inputs
  DeviceBuffer scales;    // f32 [rows]
  DeviceBuffer offsets;   // i32 [2]: one group of m rows (dense act-order)
  uint32_t offsets_rows = 0;
};

// y[m, n] = x[m, k] W^T for matrix `index` of `weights` (gather, quantize, launch).
void run_projection(Backend& backend, const ProjectionSet& set, const DeviceQuantMatrix& weights, uint32_t index,
                    DevicePtr x, DevicePtr y, uint32_t m, ProjectionScratch& scratch, uint64_t stream);
// The grouped form over every expert: rows of x grouped by `offsets` (device), `rows` in all.
void run_grouped_projection(Backend& backend, const ProjectionSet& set, const DeviceQuantMatrix& weights, DevicePtr x,
                            DevicePtr offsets, DevicePtr y, uint32_t rows, ProjectionScratch& scratch, uint64_t stream);
// The plan step of one projection of the set for m rows.
PlanStep describe_set_projection(Backend& backend, const ProjectionSet& set, const std::string& step, uint32_t m,
                                 uint32_t n, uint32_t k);

}  // namespace metrale::layers
