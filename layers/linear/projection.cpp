// SPDX-License-Identifier: MIT OR Apache-2.0
#include "linear/projection.hpp"

#include "core/launch_shape.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/levers.hpp>
#include <metrale/status.hpp>

namespace metrale::layers {

namespace {

constexpr auto kW4a16GroupedSignature = catalogue::signature("moe", "w4a16_grouped_gemm");

class W4a16Plan final : public LinearPlan {
 public:
  W4a16Plan(FamilyKernels kernels, ProjectionKernels chain) : LinearPlan(std::move(kernels)), chain_(std::move(chain)) {}
  void launch(Backend& b, const DeviceQuantMatrix& w, uint32_t index, DevicePtr x, DevicePtr, DevicePtr y, uint32_t m,
              uint64_t stream) const override {
    launch_projection(b, chain_, w, index, x, y, m, stream);
  }
  void launch_grouped(Backend& b, const DeviceQuantMatrix& w, DevicePtr x, DevicePtr, DevicePtr offsets, DevicePtr y,
                      uint64_t stream) const override {
    b.launch(kernels().grouped, launch_shape({ceil_div(w.n, 128), w.batch, 1}, 128, stream), x, w.qweight.ptr(), w.scales.ptr(), offsets, y, w.n, w.k, w.batch);
  }
  PlanStep describe(Backend& b, const std::string& step, uint32_t m, uint32_t n, uint32_t k) const override {
    return describe_projection(b, chain_, step, m, n, k);
  }

 private:
  ProjectionKernels chain_;
};

}  // namespace

const char* projection_tier_name(ProjectionTier tier) noexcept {
  switch (tier) {
    case ProjectionTier::gemv: return "gemv";
    case ProjectionTier::gemv_b8: return "gemv_b8";
    case ProjectionTier::m128: return "m128";
    case ProjectionTier::tgemm: return "tgemm";
    case ProjectionTier::k64: return "k64";
    case ProjectionTier::k64_n64: return "k64_n64";
  }
  return "?";
}

ProjectionKernels resolve_projection_kernels(Backend& backend, std::span<const ProjectionShape> shapes,
                                             std::string_view model_type, std::source_location site,
                                             const LookupNotes& notes) {
  const uint32_t min_k = w4a16_k64_min_k();
  bool need_tgemm = false;
  bool need_k64 = false;
  for (const auto& s : shapes) (s.k >= min_k ? need_k64 : need_tgemm) = true;

  // The lever that placed the k64 switch goes on the tile-GEMM lookups so the audit shows why.
  std::string switch_lever = lever_note("METRALE_W4A16_K64_MIN_K");
  if (switch_lever.empty()) switch_lever = lever_note("METRALE_NO_W4A16_K64");
  LookupNotes tiles = notes;
  if (!switch_lever.empty()) tiles.lever += (tiles.lever.empty() ? "" : ", ") + switch_lever;

  ProjectionKernels k;
  k.gemv = backend.lookup("w4a16", "w4a16_gemv", noted_request(notes, LookupKind::try_lookup, kW4a16GemmSignature), site);
  k.gemv_b8 = backend.lookup("w4a16", "w4a16_gemv_b8", noted_request(notes, LookupKind::try_lookup, kW4a16GemmSignature), site);
  if (need_tgemm) {
    // v3 first: under METRALE_W4A16_VARIANT=v3 both resolve and v3 serves.
    k.m128 = w4a16_v3_kernel(backend, site, tiles);
    if (KernelHandle v2 = w4a16_v2_kernel(backend, site, tiles); !k.m128) k.m128 = v2;
    if (tgemm_probe_ok(model_type)) k.tile.tgemm = tgemm_kernel(backend, site, tiles);
    if (!k.tile.tgemm && !k.m128) need_k64 = true;  // the deep-K kernel is the last tile GEMM left
  }
  if (need_k64) {
    try {
      k.tile.k64 = k64_kernel(backend, site, tiles);
    } catch (const Error& e) {
      std::string who;
      for (const auto& s : shapes) who += (who.empty() ? "" : ", ") + s.name + " [" + std::to_string(s.n) + ", " + std::to_string(s.k) + "]";
      const bool tgemm_missing = need_tgemm && !k.tile.tgemm && !k.m128;
      throw Error(e.status(), "no tile GEMM for " + who + " on backend '" + backend.name() + "': " +
                                  (tgemm_missing ? "the tgemm kernel is null and " : "K reaches w4a16_k64_min_k() = " +
                                                                                          std::to_string(min_k) + " and ") +
                                  "the deep-K kernel is missing: " + e.what());
    }
    k.tile.k64_n64 = k64_n64_kernel(backend, site, tiles);
  }
  return k;
}

void require_weight_layout(const Backend& backend, const ProjectionKernels& kernels, std::string_view layout) {
  for (KernelHandle kernel : {kernels.gemv, kernels.gemv_b8, kernels.m128, kernels.tile.tgemm, kernels.tile.k64,
                              kernels.tile.k64_n64})
    require_weight_layout(backend, kernel, layout);
}

ProjectionLaunch plan_projection(const ProjectionKernels& kernels, uint32_t m, uint32_t n, uint32_t k) {
  ProjectionLaunch launch;
  launch.shape.block = {128, 1, 1};
  if (m == 1 && kernels.gemv) {
    launch.kernel = kernels.gemv;
    launch.tier = ProjectionTier::gemv;
    launch.shape.grid = {ceil_div(n, 64), 1, 1};
    return launch;
  }
  if (m <= 8 && kernels.gemv_b8) {
    launch.kernel = kernels.gemv_b8;
    launch.tier = ProjectionTier::gemv_b8;
    launch.shape.grid = {ceil_div(n, 64), 1, 1};
    return launch;
  }
  const bool deep = k >= w4a16_k64_min_k();
  if (!deep && kernels.m128) {
    launch.kernel = kernels.m128;
    launch.tier = ProjectionTier::m128;
    launch.shape.grid = {ceil_div(n, 128), ceil_div(m, 128), 1};
    launch.shape.block = {256, 1, 1};
    return launch;
  }
  KernelHandle chosen = choose_tile_gemm(kernels.tile, m, n, k);
  if (!chosen && !deep) chosen = kernels.tile.k64;  // tgemm null: the deep-K kernel serves any K
  if (!chosen) {
    throw Error(Status::unavailable, "no W4A16 kernel serves m=" + std::to_string(m) + ", n=" + std::to_string(n) +
                                         ", k=" + std::to_string(k) + " (GEMV tiers and tile GEMMs all null)");
  }
  launch.kernel = chosen;
  if (chosen == kernels.tile.k64_n64) {
    launch.tier = ProjectionTier::k64_n64;
    launch.shape.grid = {ceil_div(n, 64), ceil_div(m, 64), 1};
  } else {
    launch.tier = chosen == kernels.tile.tgemm ? ProjectionTier::tgemm : ProjectionTier::k64;
    launch.shape.grid = {ceil_div(n, 128), ceil_div(m, 64), 1};
  }
  return launch;
}

void launch_projection(Backend& backend, const ProjectionKernels& kernels, const DeviceQuantMatrix& weights, uint32_t index,
                       DevicePtr x, DevicePtr y, uint32_t m, uint64_t stream) {
  ProjectionLaunch launch = plan_projection(kernels, m, weights.n, weights.k);
  launch.shape.stream = stream;
  backend.launch(launch.kernel, launch.shape, x, weights.qweight_of(index), weights.scales_of(index), y, m, weights.n,
                 weights.k);
}

PlanStep describe_projection(Backend& backend, const ProjectionKernels& kernels, const std::string& step, uint32_t m,
                             uint32_t n, uint32_t k) {
  ProjectionLaunch launch = plan_projection(kernels, m, n, k);
  PlanStep p;
  p.step = step;
  p.kernel = backend.kernel_name(launch.kernel);
  p.grid = launch.shape.grid;
  const std::string mk = "m=" + std::to_string(m) + ", n=" + std::to_string(n) + ", K=" + std::to_string(k);
  const std::string min_k = std::to_string(w4a16_k64_min_k());
  switch (launch.tier) {
    case ProjectionTier::gemv: p.why = mk + ": one row, GEMV tier"; break;
    case ProjectionTier::gemv_b8:
      p.why = mk + (m == 1 ? ": one row, no w4a16_gemv, batched GEMV tier" : ": <= 8 rows, batched GEMV tier");
      break;
    case ProjectionTier::m128: p.why = mk + ": K < " + min_k + ", m128 variant (METRALE_W4A16_VARIANT)"; break;
    case ProjectionTier::tgemm: p.why = mk + ": K < " + min_k + ", N128xM64 tile GEMM"; break;
    case ProjectionTier::k64:
      p.why = mk + (k >= w4a16_k64_min_k() ? ": K >= " + min_k + ", deep-K tile GEMM" : ": tgemm null, deep-K tile GEMM");
      break;
    case ProjectionTier::k64_n64: p.why = mk + ": K >= " + min_k + ", N64 deep-K twin (small grid)"; break;
  }
  if (m <= 8 && launch.tier != ProjectionTier::gemv && launch.tier != ProjectionTier::gemv_b8) {
    p.why += " (GEMV tiers null)";
  }
  return p;
}

std::shared_ptr<const LinearPlan> resolve_w4a16_plan(Backend& backend, const FamilyRequest& r,
                                                     std::source_location site) {
  FamilyKernels k;
  k.family = KernelFamily::w4a16;
  ProjectionKernels chain;
  if (r.grouped) {
    Backend::Resolution grouped =
        backend.resolve("moe", "w4a16_grouped_gemm", noted_request(r.notes, LookupKind::try_lookup, kW4a16GroupedSignature), site);
    k.grouped = grouped.handle;
    if (!grouped) k.absent.push_back({"moe/w4a16_grouped_gemm", std::move(grouped.reason)});
  }
  if (!k.grouped) chain = resolve_projection_kernels(backend, r.shapes, r.model_type, site, r.notes);
  k.repack = resolve_w4a16_repack(backend, site, r.notes);
  k.layout = weight_layout_of(backend, k.repack);
  require_weight_layout(backend, chain, k.layout);
  require_weight_layout(backend, k.grouped, k.layout);
  return std::make_shared<const W4a16Plan>(std::move(k), std::move(chain));
}

}  // namespace metrale::layers
