// SPDX-License-Identifier: MIT OR Apache-2.0
// The kernel families of the quantized formats (docs/kernels.md, "Quantized weight families"):
// which family runs a weight format under an activation tier, the kernels a projection site
// resolves once, and the launches it takes per m. The W4A16 family keeps its own resolution
// (projection.hpp, the selectors of docs/layers.md); the others are simpler: a GEMV for up to
// 8 rows, a tile GEMM for any m, a grouped GEMM for MoE experts, and the activation helpers of
// module `quant` (act-order gather, int8/fp8 quantization).
#pragma once

#include "core/device_quant_matrix.hpp"
#include "core/lookup_notes.hpp"
#include "linear/projection.hpp"
#include "core/quant_matrix.hpp"
#include "core/tiers.hpp"

#include <metrale/backend.hpp>

#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

enum class KernelFamily : uint8_t { w4a16, w4a16_zp, w8a16, fp8, w4a8, w8a8, fp8_a8 };

struct FamilyInfo {
  KernelFamily family;
  std::string_view module;       // manifest module: "w4a16_zp", ...
  std::string_view prefix;       // kernel name prefix within it: "w4a16_zp", "fp8"...
  WeightFormat weights;          // the format its kernels read
  ActivationQuant activations;   // how its inputs arrive
};
const FamilyInfo& family_info(KernelFamily family) noexcept;
// The family that runs `format` weights under `activations`, or nullopt when none does (int8
// activations on FP8 weights, say). W4A16 weights run under int8 activations as w4a8 (the load
// converts them to the w4-zp layout, zero points 8).
std::optional<KernelFamily> family_for(WeightFormat format, ActivationQuant activations) noexcept;

// What a site asks of a family.
struct FamilyRequest {
  KernelFamily family = KernelFamily::w4a16_zp;
  bool grouped = false;        // MoE experts: try the grouped GEMM (else per-expert launches)
  bool act_order = false;      // the weights carry a permutation: quant/gather_k is required
  bool grouped_decode = false; // try the cross-row grouped decode (fp8 only)
  LookupNotes notes;           // on every lookup's audit row: the lever that steered the tier, the tier
};

// A kernel a lookup did not get, and why (the lookup's Resolution reason).
struct KernelMiss {
  std::string kernel;  // "module/name"
  std::string reason;  // "not in manifest: ...", "gated: ..."
};

// The resolved kernels of a family site. gemv may be null (the GEMM serves every m); gemm is
// non-null; grouped / grouped_gemv are null when not asked for or absent.
struct FamilyKernels {
  KernelFamily family = KernelFamily::w4a16_zp;
  KernelHandle gemv, gemm, grouped, grouped_gemv, repack, quantize, gather;
  std::string layout;  // the layout the weights will be in (the repack's, or canonical)
  std::vector<KernelMiss> absent;  // the optional kernels looked up and not got

  // Why `kernel` ("module/name") is absent: its lookup's reason, or "not provided" when it was
  // not looked up.
  std::string why_absent(std::string_view kernel) const;
};

// Resolves with try lookups (one audit row each, site `site`). Returns nullopt and sets `missing`
// to the first required kernel the backend lacks (gemm, the activation quantizer for int8/fp8
// families, gather_k with act-order) and why. Throws Error(incompatible) when a resolved kernel
// reads another layout than the repack writes.
std::optional<FamilyKernels> resolve_family(Backend& backend, const FamilyRequest& request, KernelMiss& missing,
                                            std::source_location site = std::source_location::current());

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
// quant/quantize_int8 or quantize_fp8 of m rows of width k: xq (1 byte per value), xscale f32 [m].
void launch_quantize(Backend& backend, const FamilyKernels& kernels, DevicePtr x, DevicePtr xq, DevicePtr xscale,
                     uint32_t m, uint32_t k, uint64_t stream);
// quant/gather_k: rows grouped by `offsets` (groups + 1 entries), `rows` in all, each group
// through its own permutation of `perm`.
void launch_gather(Backend& backend, const FamilyKernels& kernels, DevicePtr x, DevicePtr perm, DevicePtr offsets,
                   DevicePtr out, uint32_t rows, uint32_t k, uint32_t groups, uint64_t stream);

// The step `metrale run` prints for m rows of an [n, k] projection.
PlanStep describe_family_projection(Backend& backend, const FamilyKernels& kernels, const std::string& step, uint32_t m,
                                    uint32_t n, uint32_t k);

}  // namespace metrale::layers
