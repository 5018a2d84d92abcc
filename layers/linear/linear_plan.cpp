// SPDX-License-Identifier: MIT OR Apache-2.0
#include "linear/linear_plan.hpp"

#include "linear/family.hpp"

#include <metrale/status.hpp>

#include <array>

namespace metrale::layers {

std::string FamilyKernels::why_absent(std::string_view kernel) const {
  for (const auto& miss : absent)
    if (miss.kernel == kernel) return miss.reason;
  return "not provided";
}

std::pair<DevicePtr, DevicePtr> LinearPlan::prepared_input(Backend& backend, const DeviceQuantMatrix& w, DevicePtr x,
                                                           DevicePtr perm, DevicePtr input_scales, DevicePtr offsets,
                                                           uint32_t rows, uint32_t groups, ProjectionScratch& scratch,
                                                           uint64_t stream) const {
  DevicePtr in = x;
  if (w.act_order) {
    scratch.gathered.ensure(backend, size_t{rows} * w.k * 2);
    launch_gather(backend, kernels_, x, perm, offsets, scratch.gathered.ptr(), rows, w.k, groups, stream);
    in = scratch.gathered.ptr();
  }
  if (!kernels_.quantize) return {in, DevicePtr{}};
  scratch.quantized.ensure(backend, size_t{rows} * w.k);
  scratch.scales.ensure(backend, size_t{rows} * (w.k / scale_width(kernels_.scaling, w.k)) * sizeof(float));
  if (kernels_.scaling.static_tensor) {
    launch_quantize_static(backend, kernels_, in, input_scales, offsets, scratch.quantized.ptr(), scratch.scales.ptr(), rows,
                           w.k, groups, stream);
  } else {
    launch_quantize(backend, kernels_, in, scratch.quantized.ptr(), scratch.scales.ptr(), rows, w.k, stream);
  }
  return {scratch.quantized.ptr(), scratch.scales.ptr()};
}

void LinearPlan::run(Backend& backend, const DeviceQuantMatrix& w, uint32_t index, DevicePtr x, DevicePtr y, uint32_t m,
                     ProjectionScratch& scratch, uint64_t stream) const {
  const bool static_scales = kernels_.scaling.static_tensor;
  DevicePtr perm{}, input_scale{};
  if (w.act_order || static_scales) {
    // One group of m rows, through matrix `index`'s permutation and with its static scale.
    if (scratch.offsets_rows != m) {
      scratch.offsets.ensure(backend, 2 * sizeof(int32_t));
      const std::array<int32_t, 2> offsets{0, static_cast<int32_t>(m)};
      scratch.offsets.upload(std::span<const int32_t>(offsets), 0, stream);
      scratch.offsets_rows = m;
    }
    if (w.act_order) perm = w.perm.at(size_t{index} * w.k * sizeof(int32_t));
    if (static_scales) input_scale = static_scales_of(w).at(size_t{index} * sizeof(float));
  }
  const auto [input, xscale] = prepared_input(backend, w, x, perm, input_scale, scratch.offsets.ptr(), m, 1, scratch, stream);
  launch(backend, w, index, input, xscale, y, m, stream);
}

void LinearPlan::run_grouped(Backend& backend, const DeviceQuantMatrix& w, DevicePtr x, DevicePtr offsets, DevicePtr y,
                             uint32_t rows, ProjectionScratch& scratch, uint64_t stream) const {
  const DevicePtr perm = w.act_order ? w.perm.ptr() : DevicePtr{};
  const DevicePtr input_scales = kernels_.scaling.static_tensor ? static_scales_of(w).ptr() : DevicePtr{};
  const auto [input, xscale] = prepared_input(backend, w, x, perm, input_scales, offsets, rows, w.batch, scratch, stream);
  launch_grouped(backend, w, input, xscale, offsets, y, stream);
}

const DeviceBuffer& LinearPlan::static_scales_of(const DeviceQuantMatrix& w) {
  if (w.input_scales.bytes() < size_t{w.batch} * sizeof(float)) {
    throw Error(Status::invalid_argument, w.name + ": the activation tier quantizes with static scales, but the weights "
                                                   "carry none (no input_scale)");
  }
  return w.input_scales;
}

}  // namespace metrale::layers
