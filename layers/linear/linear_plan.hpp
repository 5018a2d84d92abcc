// SPDX-License-Identifier: MIT OR Apache-2.0
// The quantized-linear building block every layer reuses: one projection site under one kernel
// family, resolved once, then launched for any m. Every weight format implements the same
// interface (docs/layers.md, "The linear core"):
//   W4A16       linear/projection.cpp: the GEMV / tile-GEMM chain of the selectors
//   zero-point  linear/family.cpp: w4a16_zp, w8a16, w4a8, w8a8
//   FP8         linear/family.cpp: fp8 with bf16 or fp8 activations
// family.hpp resolves a site's plan (resolve_linear_plan). A plan is immutable once resolved:
// share it freely between threads and layers (the launches themselves follow the backend's stream
// rules). The scratch a run uses is the caller's.
#pragma once

#include "core/device_buffer.hpp"
#include "core/device_quant_matrix.hpp"
#include "core/layer.hpp"
#include "core/lookup_notes.hpp"
#include "core/tiers.hpp"

#include <metrale/backend.hpp>

#include <memory>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

enum class KernelFamily : uint8_t { w4a16, w4a16_zp, w8a16, fp8, w4a8, w8a8, fp8_a8, w4afp8, bf16, f16 };

// One projection of a site, for shape checks, messages and the kernels that depend on K.
struct ProjectionShape {
  std::string name;  // "ffn.gate_up"
  uint32_t n = 0;
  uint32_t k = 0;
};

// What a site asks of a family.
struct FamilyRequest {
  KernelFamily family = KernelFamily::w4a16_zp;
  bool grouped = false;        // MoE experts: try the grouped GEMM (else per-expert launches)
  bool act_order = false;      // the weights carry a permutation: quant/gather_k is required
  bool grouped_decode = false; // try the cross-row grouped decode (fp8 only)
  LookupNotes notes;           // on every lookup's audit row: the lever that steered the tier, the tier
  std::vector<ProjectionShape> shapes;  // every projection of the site (kernels chosen by K need them)
  std::string model_type;               // some kernels are probed for some model types only
  ActivationScaling scaling;            // int8/fp8 families: how the quantizer sets its scales (its kernels follow)
};

// A kernel a lookup did not get, and why (the lookup's Resolution reason).
struct KernelMiss {
  std::string kernel;  // "module/name"
  std::string reason;  // "not in manifest: ...", "gated: ..."
};

// The kernels a family site resolved. gemv / gemm are the zero-point and FP8 families' own
// (gemm non-null there, both null for W4A16, whose chain its plan keeps); grouped / grouped_gemv
// are null when not asked for or absent; quantize is set for int8/fp8 activations, gather with
// act-order.
struct FamilyKernels {
  KernelFamily family = KernelFamily::w4a16_zp;
  KernelHandle gemv, gemm, grouped, grouped_gemv, repack, quantize, gather;
  // int8/fp8 families: the quantizer's scales (xscale per row, per 128 columns, or static);
  // default for the bf16 families, whose plans quantize nothing.
  ActivationScaling scaling;
  std::string layout;  // the layout the weights will be in (the repack's, or canonical)
  std::vector<KernelMiss> absent;  // the optional kernels looked up and not got

  // Why `kernel` ("module/name") is absent: its lookup's reason, or "not provided" when it was
  // not looked up.
  std::string why_absent(std::string_view kernel) const;
};

// Scratch a layer keeps for its projections' input preparation, grown to the largest use.
struct ProjectionScratch {
  DeviceBuffer gathered;  // bf16 [rows][k]: act-order inputs
  DeviceBuffer quantized; // 1 byte per value: int8/fp8 inputs
  DeviceBuffer scales;    // f32 [rows]
  DeviceBuffer offsets;   // i32 [2]: one group of m rows (dense act-order)
  uint32_t offsets_rows = 0;
};

class LinearPlan {
 public:
  explicit LinearPlan(FamilyKernels kernels) : kernels_(std::move(kernels)) {}
  virtual ~LinearPlan() = default;
  LinearPlan(const LinearPlan&) = delete;
  LinearPlan& operator=(const LinearPlan&) = delete;

  const FamilyKernels& kernels() const noexcept { return kernels_; }
  KernelFamily family() const noexcept { return kernels_.family; }

  // y[m, n] = x[m, k] W^T for matrix `index`: gathers (act-order) and quantizes (int8/fp8
  // activations) x into `scratch` as the family needs, then launches.
  void run(Backend& backend, const DeviceQuantMatrix& weights, uint32_t index, DevicePtr x, DevicePtr y, uint32_t m,
           ProjectionScratch& scratch, uint64_t stream) const;
  // The grouped form over every matrix (MoE experts): rows of x grouped by `offsets` (device,
  // batch + 1 entries), `rows` in all. Needs kernels().grouped.
  void run_grouped(Backend& backend, const DeviceQuantMatrix& weights, DevicePtr x, DevicePtr offsets, DevicePtr y,
                   uint32_t rows, ProjectionScratch& scratch, uint64_t stream) const;

  // The family's own launches on prepared inputs: x is bf16, or under int8/fp8 activations the
  // quantized rows with their f32 scales in xscale (null otherwise).
  virtual void launch(Backend& backend, const DeviceQuantMatrix& weights, uint32_t index, DevicePtr x, DevicePtr xscale,
                      DevicePtr y, uint32_t m, uint64_t stream) const = 0;
  virtual void launch_grouped(Backend& backend, const DeviceQuantMatrix& weights, DevicePtr x, DevicePtr xscale,
                              DevicePtr offsets, DevicePtr y, uint64_t stream) const = 0;
  // The step `metrale run` prints for m rows of an [n, k] projection of this site.
  virtual PlanStep describe(Backend& backend, const std::string& step, uint32_t m, uint32_t n, uint32_t k) const = 0;

 private:
  // x as the family's kernels read it, {input, row scales}: `rows` rows in `groups` groups by
  // `offsets`, gathered through `perm` when the weights carry a permutation, then quantized under
  // int8/fp8 activations (with static scales, group g by input_scales[g]).
  std::pair<DevicePtr, DevicePtr> prepared_input(Backend& backend, const DeviceQuantMatrix& weights, DevicePtr x,
                                                 DevicePtr perm, DevicePtr input_scales, DevicePtr offsets, uint32_t rows,
                                                 uint32_t groups, ProjectionScratch& scratch, uint64_t stream) const;
  // The weights' static activation scales; Error(invalid_argument) naming them when they carry none.
  static const DeviceBuffer& static_scales_of(const DeviceQuantMatrix& weights);
  FamilyKernels kernels_;
};

}  // namespace metrale::layers
