// SPDX-License-Identifier: MIT OR Apache-2.0
// One W4A16 projection site: the kernels it resolves once at build time and the launch it takes
// for a given m (docs/layers.md, "Fallback chain"):
//   m == 1 -> w4a16_gemv; m <= 8 -> w4a16_gemv_b8; else (or when those are null) the tile-GEMM
//   site (docs/layers.md, "Fallback chain"): K >= w4a16_k64_min_k() -> the deep-K k64 kernel (its N64 twin
//   when non-null and k64_n64_wins(m, n)); else the m128 v3/v2 kernel when METRALE_W4A16_VARIANT
//   opts in, else tgemm (w4a16_gemm_t_p3 / w4a16_gemm_t). When tgemm is null (model types whose
//   builder skips the probe, or a backend without it) the deep-K kernel serves every K.
// Every section-7 decision goes through layers/linear/selectors.hpp. The W4A16 family's linear
// plan (linear_plan.hpp) is this chain, with MoE experts trying moe/w4a16_grouped_gemm first.
#pragma once

#include "core/device_quant_matrix.hpp"
#include "core/layer.hpp"

#include "linear/linear_plan.hpp"
#include "linear/selectors.hpp"

#include <metrale/backend.hpp>

#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

struct ProjectionKernels {
  KernelHandle gemv;     // w4a16/w4a16_gemv, try
  KernelHandle gemv_b8;  // w4a16/w4a16_gemv_b8, try
  KernelHandle m128;     // w4a16_v3 or w4a16_v2 m128 kernel, only when opted in
  TileGemmKernels tile;  // tgemm, k64, k64_n64 as the site needs them
};

enum class ProjectionTier { gemv, gemv_b8, m128, tgemm, k64, k64_n64 };
const char* projection_tier_name(ProjectionTier tier) noexcept;

struct ProjectionLaunch {
  KernelHandle kernel;
  ProjectionTier tier = ProjectionTier::tgemm;
  LaunchShape shape;
};

// Resolves the kernels for every projection in `shapes` (one layer), recording `site` in the
// audit: the GEMV tiers always; tgemm (and the opt-in m128 variant) when some K is below the
// k64 threshold; the deep-K pair when some K reaches it, or when tgemm came back null. Every row
// carries `notes` (the caller's tier and lever); the tile-GEMM rows also the lever that placed
// the k64 switch. Throws Error when no tile GEMM can serve some projection.
ProjectionKernels resolve_projection_kernels(Backend& backend, std::span<const ProjectionShape> shapes,
                                             std::string_view model_type,
                                             std::source_location site = std::source_location::current(),
                                             const LookupNotes& notes = {});

// Throws Error(incompatible) unless every kernel of `kernels` reads weights in `layout`
// (require_weight_layout of device_quant_matrix.hpp on each non-null handle).
void require_weight_layout(const Backend& backend, const ProjectionKernels& kernels, std::string_view layout);

// The launch for m rows of an [n, k] projection. Throws Error(unavailable) when no kernel serves.
ProjectionLaunch plan_projection(const ProjectionKernels& kernels, uint32_t m, uint32_t n, uint32_t k);

// y[m, n] = x[m, k] * W^T for matrix `index` of `weights`, which must be in the layout the kernels
// read (checked once, by require_weight_layout, when the layer resolves them).
void launch_projection(Backend& backend, const ProjectionKernels& kernels, const DeviceQuantMatrix& weights,
                       uint32_t index, DevicePtr x, DevicePtr y, uint32_t m, uint64_t stream);

// The step of a layer's forward pass this projection takes for m rows: for `metrale run` and tests.
PlanStep describe_projection(Backend& backend, const ProjectionKernels& kernels, const std::string& step,
                             uint32_t m, uint32_t n, uint32_t k);

// The W4A16 family's plan for a site (request.shapes, request.model_type): MoE experts
// (request.grouped) try moe/w4a16_grouped_gemm and resolve the chain only without it; the weights
// load through the backend's w4a16 repack when it has one. Every lookup carries request.notes.
// Throws Error as resolve_projection_kernels does, and Error(incompatible) when a kernel cannot
// read the repack's layout.
std::shared_ptr<const LinearPlan> resolve_w4a16_plan(Backend& backend, const FamilyRequest& request,
                                                     std::source_location site = std::source_location::current());

}  // namespace metrale::layers
