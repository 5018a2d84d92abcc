// SPDX-License-Identifier: MIT OR Apache-2.0
// The kernel families of the quantized formats (docs/kernels.md, "Quantized weight families"):
// which family runs a weight format under an activation tier, and the zero-point and FP8
// families' implementation of the linear plan (linear_plan.hpp): a GEMV for up to 8 rows, a tile
// GEMM for any m, a grouped GEMM for MoE experts, and the activation helpers of module `quant`
// (act-order gather, int8/fp8 quantization). The W4A16 family's plan is in projection.hpp.
#pragma once

#include "core/device_quant_matrix.hpp"
#include "core/lookup_notes.hpp"
#include "core/quant_matrix.hpp"
#include "core/tiers.hpp"
#include "linear/linear_plan.hpp"

#include <metrale/backend.hpp>

#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

struct FamilyInfo {
  KernelFamily family;
  std::string_view module;       // manifest module: "w4a16_zp", ...
  std::string_view prefix;       // kernel name prefix within it: "w4a16_zp", "fp8"...
  WeightFormat weights;          // the format its kernels read
  ActivationQuant activations;   // how its inputs arrive
};
const FamilyInfo& family_info(KernelFamily family) noexcept;
// The format weights of `format` are loaded in: W4A16 weights with a permutation load as w4-zp
// (zero points 8), whose kernels gather; every other format as it is.
WeightFormat loaded_format(WeightFormat format, bool act_order) noexcept;
// The family that runs `format` weights under `activations`, or nullopt when none does (int8
// activations on FP8 weights, say). W4A16 weights run under int8 activations as w4a8 (the load
// converts them to the w4-zp layout, zero points 8).
std::optional<KernelFamily> family_for(WeightFormat format, ActivationQuant activations) noexcept;

// Resolves the plan of `request.family` with try lookups (one audit row each, site `site`).
// Returns null and sets `missing` to the first required kernel the backend lacks and why. Throws
// Error(incompatible) when a resolved kernel reads another layout than the weights will be in,
// and Error when the W4A16 chain has no tile GEMM for some projection.
std::shared_ptr<const LinearPlan> resolve_linear_plan(Backend& backend, const FamilyRequest& request, KernelMiss& missing,
                                                      std::source_location site = std::source_location::current());

// The kernels of a zero-point or FP8 family (not W4A16), with try lookups (one audit row each,
// site `site`). Returns nullopt and sets `missing` to the first required kernel the backend lacks
// (gemm, the activation quantizer for int8/fp8 families, gather_k with act-order) and why. Throws
// Error(incompatible) when a resolved kernel reads another layout than the repack writes.
std::optional<FamilyKernels> resolve_family(Backend& backend, const FamilyRequest& request, KernelMiss& missing,
                                            std::source_location site = std::source_location::current());
// Those kernels as a linear plan.
std::shared_ptr<const LinearPlan> family_plan(FamilyKernels kernels);

// Launch of one projection: y[m, n] = x[m, k] * W^T for matrix `index`. For int8/fp8 families
// `x` is the quantized activation buffer and `xscale` its row scales (quantize first).
void launch_family_projection(Backend& backend, const FamilyKernels& kernels, const DeviceQuantMatrix& weights,
                              uint32_t index, DevicePtr x, DevicePtr xscale, DevicePtr y, uint32_t m,
                              uint64_t stream);
// Grouped launch over all experts (rows grouped by `offsets`, T rows in all).
void launch_family_grouped(Backend& backend, const FamilyKernels& kernels, const DeviceQuantMatrix& weights,
                           DevicePtr x, DevicePtr xscale, DevicePtr offsets, DevicePtr y, uint64_t stream);
// Cross-row grouped decode: only the experts `active` lists (moe/moe_align), `slots` >= their count.
void launch_family_grouped_decode(Backend& backend, const FamilyKernels& kernels, const DeviceQuantMatrix& weights,
                                  DevicePtr x, DevicePtr offsets, DevicePtr active, DevicePtr y, uint32_t slots,
                                  uint64_t stream);
// The family's quantizer (quant/quantize_int8, quantize_fp8, ...) of m rows of width k: xq (1
// byte per value), xscale f32 [m] or, with scales per 128 columns, [m][k / 128].
void launch_quantize(Backend& backend, const FamilyKernels& kernels, DevicePtr x, DevicePtr xq, DevicePtr xscale,
                     uint32_t m, uint32_t k, uint64_t stream);
// quant/quantize_*_static_bf16: rows grouped by `offsets` (groups + 1 entries), `rows` in all,
// each group with its own stored scale of `scales` (f32 [groups]); xscale f32 [rows].
void launch_quantize_static(Backend& backend, const FamilyKernels& kernels, DevicePtr x, DevicePtr scales,
                            DevicePtr offsets, DevicePtr xq, DevicePtr xscale, uint32_t rows, uint32_t k, uint32_t groups,
                            uint64_t stream);
// quant/gather_k: rows grouped by `offsets` (groups + 1 entries), `rows` in all, each group
// through its own permutation of `perm`.
void launch_gather(Backend& backend, const FamilyKernels& kernels, DevicePtr x, DevicePtr perm, DevicePtr offsets,
                   DevicePtr out, uint32_t rows, uint32_t k, uint32_t groups, uint64_t stream);

// The step `metrale run` prints for m rows of an [n, k] projection.
PlanStep describe_family_projection(Backend& backend, const FamilyKernels& kernels, const std::string& step, uint32_t m,
                                    uint32_t n, uint32_t k);

}  // namespace metrale::layers
