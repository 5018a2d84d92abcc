// SPDX-License-Identifier: MIT OR Apache-2.0
#include "linear/family.hpp"

#include "core/launch_shape.hpp"
#include "linear/projection.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/status.hpp>

#include <array>

namespace metrale::layers {

namespace {

constexpr std::array<FamilyInfo, 10> kFamilies{{
    {KernelFamily::w4a16, "w4a16", "w4a16", WeightFormat::w4a16, ActivationQuant::bf16},
    {KernelFamily::w4a16_zp, "w4a16_zp", "w4a16_zp", WeightFormat::w4_zp, ActivationQuant::bf16},
    {KernelFamily::w8a16, "w8a16", "w8a16", WeightFormat::w8_zp, ActivationQuant::bf16},
    {KernelFamily::fp8, "fp8", "fp8", WeightFormat::fp8, ActivationQuant::bf16},
    {KernelFamily::w4a8, "w4a8", "w4a8", WeightFormat::w4_zp, ActivationQuant::int8},
    {KernelFamily::w8a8, "w8a8", "w8a8", WeightFormat::w8_zp, ActivationQuant::int8},
    {KernelFamily::fp8_a8, "fp8", "fp8", WeightFormat::fp8, ActivationQuant::fp8},
    {KernelFamily::w4afp8, "w4afp8", "w4afp8", WeightFormat::w4_zp, ActivationQuant::fp8},
    {KernelFamily::bf16, "bf16", "bf16", WeightFormat::bf16, ActivationQuant::bf16},
    {KernelFamily::f16, "f16", "f16", WeightFormat::f16, ActivationQuant::bf16},
}};

// Every kernel of the families runs 128-thread blocks but the quantizers (256).
LaunchShape shape(std::array<uint32_t, 3> grid, uint64_t stream, uint32_t block = 128) {
  return launch_shape(grid, block, stream);
}

// The parameter list manifests/catalogue.json documents for `module`/`name` (names made at run time).
std::span<const metrale_param_type> documented_signature(std::string_view module, std::string_view name) {
  const catalogue::DocumentedKernel* kernel = catalogue::find(module, name);
  if (kernel == nullptr) {
    throw Error(Status::internal, std::string(module) + "/" + std::string(name) + " is not in manifests/catalogue.json");
  }
  return kernel->types;
}

struct Lookup {
  Backend& backend;
  const FamilyRequest& request;
  std::source_location site;
  KernelMiss& missing;
  std::vector<KernelMiss>& absent;

  // Expects the parameters of `params_of`, a documented kernel of `module` (empty: `name` itself).
  Backend::Resolution find(std::string_view module, const std::string& name, std::string_view params_of = {}) const {
    const auto expected = documented_signature(module, params_of.empty() ? std::string_view(name) : params_of);
    return backend.resolve(module, name, noted_request(request.notes, LookupKind::try_lookup, expected), site);
  }
  // A kernel the family runs without: a miss is kept with its reason.
  KernelHandle get(std::string_view module, const std::string& name, std::string_view params_of = {}) const {
    Backend::Resolution r = find(module, name, params_of);
    if (!r) absent.push_back({std::string(module) + "/" + name, std::move(r.reason)});
    return r.handle;
  }
  // A kernel the family cannot run without: the first one missing is kept with its reason.
  KernelHandle need(std::string_view module, const std::string& name) const {
    Backend::Resolution r = find(module, name);
    if (!r && missing.kernel.empty()) missing = {std::string(module) + "/" + name, std::move(r.reason)};
    return r.handle;
  }
};

void resolve_zp(const Lookup& l, const FamilyInfo& f, FamilyKernels& k) {
  const std::string p(f.prefix);
  // The GEMV takes the GEMM's parameters: w4afp8 documents no GEMV, yet a backend may offer one.
  k.gemv = l.get(f.module, p + "_gemv", p + "_gemm");
  k.gemm = l.need(f.module, p + "_gemm");
  if (l.request.grouped) k.grouped = l.get(f.module, p + "_grouped_gemm");
  k.repack = l.get(f.module, p + "_repack");
}

void resolve_fp8(const Lookup& l, const FamilyInfo& f, FamilyKernels& k) {
  if (f.activations == ActivationQuant::fp8) {
    // Scales per 128 columns of the activations: the GEMMs that read them.
    const std::string groups = l.request.scaling.group128 ? "_group128" : "";
    k.gemv = l.get(f.module, "fp8_gemv_a8" + groups);
    k.gemm = l.need(f.module, "fp8_gemm_a8" + groups);
    if (l.request.grouped) k.grouped = l.get(f.module, "fp8_grouped_gemm_a8" + groups);
  } else {
    k.gemv = l.get(f.module, "fp8_gemv");
    k.gemm = l.need(f.module, "fp8_gemm");
    if (l.request.grouped) k.grouped = l.get(f.module, "fp8_grouped_gemm");
    if (l.request.grouped_decode) k.grouped_gemv = l.get(f.module, "fp8_grouped_gemv");
  }
  k.repack = l.get(f.module, "fp8_repack");
}

// bf16 / f16 weights: bf16 activations only (the values need no quantized activations).
void resolve_w16(const Lookup& l, const FamilyInfo& f, FamilyKernels& k) {
  const std::string p(f.prefix);
  k.gemv = l.get(f.module, p + "_gemv");
  k.gemm = l.need(f.module, p + "_gemm");
  if (l.request.grouped) k.grouped = l.get(f.module, p + "_grouped_gemm");
  k.repack = l.get(f.module, p + "_repack");
}

// quant/quantize_int8[_bf16], quantize_fp8[_group128][_bf16], quantize_*_static_bf16
// (docs/kernels.md).
std::string quantizer_name(ActivationQuant a, ActivationScaling scaling) {
  if ((a == ActivationQuant::int8 && scaling.group128) ||
      (scaling.static_tensor && (scaling.group128 || scaling.arithmetic != ScaleArithmetic::bf16))) {
    throw Error(Status::internal, "no quantizer scales int8 activations per 128 columns; static scales are per tensor, "
                                  "in bf16 arithmetic");
  }
  std::string name = a == ActivationQuant::int8 ? "quantize_int8" : "quantize_fp8";
  if (scaling.group128) name += "_group128";
  if (scaling.static_tensor) name += "_static";
  if (scaling.arithmetic == ScaleArithmetic::bf16) name += "_bf16";
  return name;
}

// The zero-point and FP8 families' plan: the GEMV up to 8 rows when there is one, else the GEMM.
class TiledFamilyPlan final : public LinearPlan {
 public:
  using LinearPlan::LinearPlan;
  void launch(Backend& b, const DeviceQuantMatrix& w, uint32_t index, DevicePtr x, DevicePtr xscale, DevicePtr y,
              uint32_t m, uint64_t stream) const override {
    launch_family_projection(b, kernels(), w, index, x, xscale, y, m, stream);
  }
  void launch_grouped(Backend& b, const DeviceQuantMatrix& w, DevicePtr x, DevicePtr xscale, DevicePtr offsets,
                      DevicePtr y, uint64_t stream) const override {
    launch_family_grouped(b, kernels(), w, x, xscale, offsets, y, stream);
  }
  PlanStep describe(Backend& b, const std::string& step, uint32_t m, uint32_t n, uint32_t k) const override {
    return describe_family_projection(b, kernels(), step, m, n, k);
  }
};

}  // namespace

const FamilyInfo& family_info(KernelFamily family) noexcept { return kFamilies[static_cast<size_t>(family)]; }

WeightFormat loaded_format(WeightFormat format, bool act_order) noexcept {
  return format == WeightFormat::w4a16 && act_order ? WeightFormat::w4_zp : format;
}

std::optional<KernelFamily> family_for(WeightFormat format, ActivationQuant activations) noexcept {
  switch (activations) {
    case ActivationQuant::bf16:
      switch (format) {
        case WeightFormat::w4a16: return KernelFamily::w4a16;
        case WeightFormat::w4_zp: return KernelFamily::w4a16_zp;
        case WeightFormat::w8_zp: return KernelFamily::w8a16;
        case WeightFormat::fp8: return KernelFamily::fp8;
        case WeightFormat::bf16: return KernelFamily::bf16;
        case WeightFormat::f16: return KernelFamily::f16;
      }
      break;
    case ActivationQuant::int8:
      if (format == WeightFormat::w4a16 || format == WeightFormat::w4_zp) return KernelFamily::w4a8;
      if (format == WeightFormat::w8_zp) return KernelFamily::w8a8;
      break;
    case ActivationQuant::fp8:
      if (format == WeightFormat::fp8) return KernelFamily::fp8_a8;
      if (format == WeightFormat::w4a16 || format == WeightFormat::w4_zp) return KernelFamily::w4afp8;
      break;
  }
  return std::nullopt;
}

std::optional<FamilyKernels> resolve_family(Backend& backend, const FamilyRequest& request, KernelMiss& missing,
                                            std::source_location site) {
  const FamilyInfo& f = family_info(request.family);
  if (request.family == KernelFamily::w4a16) {
    throw Error(Status::internal, "resolve_family: the W4A16 family resolves through resolve_w4a16_plan");
  }
  missing = {};
  FamilyKernels k;
  const Lookup l{backend, request, site, missing, k.absent};
  k.family = request.family;
  if (f.weights == WeightFormat::fp8) {
    resolve_fp8(l, f, k);
  } else if (!weight_format_has_scales(f.weights)) {
    resolve_w16(l, f, k);
  } else {
    resolve_zp(l, f, k);
  }
  if (f.activations != ActivationQuant::bf16) {
    k.scaling = request.scaling;
    k.quantize = l.need("quant", quantizer_name(f.activations, request.scaling));
  }
  if (request.act_order) k.gather = l.need("quant", "gather_k");
  if (!missing.kernel.empty()) return std::nullopt;
  const std::string canonical = weight_format_name(f.weights);
  const std::string repack_name = std::string(f.module) + "/" + std::string(f.prefix) + "_repack";
  k.layout = weight_layout_of(backend, k.repack, canonical);
  for (KernelHandle h : {k.gemv, k.gemm, k.grouped, k.grouped_gemv}) {
    require_weight_layout(backend, h, k.layout, canonical, repack_name);
  }
  return k;
}

std::shared_ptr<const LinearPlan> family_plan(FamilyKernels kernels) {
  return std::make_shared<const TiledFamilyPlan>(std::move(kernels));
}

void launch_family_projection(Backend& backend, const FamilyKernels& k, const DeviceQuantMatrix& w, uint32_t index,
                              DevicePtr x, DevicePtr xscale, DevicePtr y, uint32_t m, uint64_t stream) {
  const bool small = m <= 8 && k.gemv;
  const KernelHandle kernel = small ? k.gemv : k.gemm;
  const LaunchShape s = small ? shape({ceil_div(w.n, 64), 1, 1}, stream) : shape({ceil_div(w.n, 128), ceil_div(m, 64), 1}, stream);
  const FamilyInfo& f = family_info(k.family);
  const DevicePtr q = w.qweight_of(index), sc = w.scales_of(index);
  if (!weight_format_has_scales(f.weights)) {
    backend.launch(kernel, s, x, q, y, m, w.n, w.k);
  } else if (f.weights == WeightFormat::fp8) {
    if (f.activations == ActivationQuant::fp8) {
      backend.launch(kernel, s, x, xscale, q, sc, y, m, w.n, w.k);
    } else {
      backend.launch(kernel, s, x, q, sc, y, m, w.n, w.k);
    }
  } else if (f.activations != ActivationQuant::bf16) {
    backend.launch(kernel, s, x, xscale, q, sc, w.zeros_of(index), y, m, w.n, w.k, w.group);
  } else {
    backend.launch(kernel, s, x, q, sc, w.zeros_of(index), y, m, w.n, w.k, w.group);
  }
}

void launch_family_grouped(Backend& backend, const FamilyKernels& k, const DeviceQuantMatrix& w, DevicePtr x,
                           DevicePtr xscale, DevicePtr offsets, DevicePtr y, uint64_t stream) {
  const LaunchShape s = shape({ceil_div(w.n, 128), w.batch, 1}, stream);
  const FamilyInfo& f = family_info(k.family);
  const DevicePtr q = w.qweight.ptr(), sc = w.scales.ptr();
  if (!weight_format_has_scales(f.weights)) {
    backend.launch(k.grouped, s, x, q, offsets, y, w.n, w.k, w.batch);
  } else if (f.weights == WeightFormat::fp8) {
    if (f.activations == ActivationQuant::fp8) {
      backend.launch(k.grouped, s, x, xscale, q, sc, offsets, y, w.n, w.k, w.batch);
    } else {
      backend.launch(k.grouped, s, x, q, sc, offsets, y, w.n, w.k, w.batch);
    }
  } else if (f.activations != ActivationQuant::bf16) {
    backend.launch(k.grouped, s, x, xscale, q, sc, w.zeros.ptr(), offsets, y, w.n, w.k, w.group, w.batch);
  } else {
    backend.launch(k.grouped, s, x, q, sc, w.zeros.ptr(), offsets, y, w.n, w.k, w.group, w.batch);
  }
}

void launch_family_grouped_decode(Backend& backend, const FamilyKernels& k, const DeviceQuantMatrix& w, DevicePtr x,
                                  DevicePtr offsets, DevicePtr active, DevicePtr y, uint32_t slots, uint64_t stream) {
  backend.launch(k.grouped_gemv, shape({ceil_div(w.n, 64), slots, 1}, stream), x, w.qweight.ptr(), w.scales.ptr(), offsets,
                 active, y, w.n, w.k, slots);
}

void launch_quantize(Backend& backend, const FamilyKernels& k, DevicePtr x, DevicePtr xq, DevicePtr xscale, uint32_t m,
                     uint32_t width, uint64_t stream) {
  backend.launch(k.quantize, shape({m, 1, 1}, stream, 256), x, xq, xscale, m, width);
}

void launch_quantize_static(Backend& backend, const FamilyKernels& k, DevicePtr x, DevicePtr scales, DevicePtr offsets,
                            DevicePtr xq, DevicePtr xscale, uint32_t rows, uint32_t width, uint32_t groups, uint64_t stream) {
  backend.launch(k.quantize, shape({rows, 1, 1}, stream), x, scales, offsets, xq, xscale, width, groups);
}

void launch_gather(Backend& backend, const FamilyKernels& k, DevicePtr x, DevicePtr perm, DevicePtr offsets, DevicePtr out,
                   uint32_t rows, uint32_t width, uint32_t groups, uint64_t stream) {
  backend.launch(k.gather, shape({rows, 1, 1}, stream), x, perm, offsets, out, width, groups);
}

PlanStep describe_family_projection(Backend& backend, const FamilyKernels& k, const std::string& step, uint32_t m,
                                    uint32_t n, uint32_t width) {
  const bool small = m <= 8 && k.gemv;
  PlanStep p;
  p.step = step;
  p.kernel = backend.kernel_name(small ? k.gemv : k.gemm);
  p.grid = small ? std::array<uint32_t, 3>{ceil_div(n, 64), 1, 1} : std::array<uint32_t, 3>{ceil_div(n, 128), ceil_div(m, 64), 1};
  const std::string mk = "m=" + std::to_string(m) + ", n=" + std::to_string(n) + ", K=" + std::to_string(width);
  p.why = mk + (small ? ": <= 8 rows, GEMV" : m <= 8 ? ": no GEMV, tile GEMM" : ": tile GEMM");
  const FamilyInfo& f = family_info(k.family);
  if (f.activations != ActivationQuant::bf16) {
    p.why += std::string(", ") + activation_quant_name(f.activations) + " activations " + activation_scaling_name(k.scaling);
  }
  if (k.gather) p.why += ", act-order gather first";
  return p;
}

std::shared_ptr<const LinearPlan> resolve_linear_plan(Backend& backend, const FamilyRequest& request, KernelMiss& missing,
                                                      std::source_location site) {
  missing = {};
  // The one place a family picks its implementation of the interface.
  if (request.family == KernelFamily::w4a16) return resolve_w4a16_plan(backend, request, site);
  std::optional<FamilyKernels> kernels = resolve_family(backend, request, missing, site);
  if (!kernels) return nullptr;
  return family_plan(std::move(*kernels));
}

}  // namespace metrale::layers
