// SPDX-License-Identifier: MIT OR Apache-2.0
#include "linear/linear_plan.hpp"

#include "linear/family.hpp"

#include <array>

namespace metrale::layers {

std::string FamilyKernels::why_absent(std::string_view kernel) const {
  for (const auto& miss : absent)
    if (miss.kernel == kernel) return miss.reason;
  return "not provided";
}

std::pair<DevicePtr, DevicePtr> LinearPlan::prepared_input(Backend& backend, const DeviceQuantMatrix& w, DevicePtr x,
                                                           DevicePtr perm, DevicePtr offsets, uint32_t rows, uint32_t groups,
                                                           ProjectionScratch& scratch, uint64_t stream) const {
  DevicePtr in = x;
  if (w.act_order) {
    scratch.gathered.ensure(backend, size_t{rows} * w.k * 2);
    launch_gather(backend, kernels_, x, perm, offsets, scratch.gathered.ptr(), rows, w.k, groups, stream);
    in = scratch.gathered.ptr();
  }
  if (!kernels_.quantize) return {in, DevicePtr{}};
  scratch.quantized.ensure(backend, size_t{rows} * w.k);
  scratch.scales.ensure(backend, size_t{rows} * sizeof(float));
  launch_quantize(backend, kernels_, in, scratch.quantized.ptr(), scratch.scales.ptr(), rows, w.k, stream);
  return {scratch.quantized.ptr(), scratch.scales.ptr()};
}

void LinearPlan::run(Backend& backend, const DeviceQuantMatrix& w, uint32_t index, DevicePtr x, DevicePtr y, uint32_t m,
                     ProjectionScratch& scratch, uint64_t stream) const {
  DevicePtr perm{};
  if (w.act_order) {
    // One group of m rows through matrix `index`'s permutation.
    if (scratch.offsets_rows != m) {
      scratch.offsets.ensure(backend, 2 * sizeof(int32_t));
      const std::array<int32_t, 2> offsets{0, static_cast<int32_t>(m)};
      scratch.offsets.upload(std::span<const int32_t>(offsets), 0, stream);
      scratch.offsets_rows = m;
    }
    perm = w.perm.at(size_t{index} * w.k * sizeof(int32_t));
  }
  const auto [input, xscale] = prepared_input(backend, w, x, perm, scratch.offsets.ptr(), m, 1, scratch, stream);
  launch(backend, w, index, input, xscale, y, m, stream);
}

void LinearPlan::run_grouped(Backend& backend, const DeviceQuantMatrix& w, DevicePtr x, DevicePtr offsets, DevicePtr y,
                             uint32_t rows, ProjectionScratch& scratch, uint64_t stream) const {
  const DevicePtr perm = w.act_order ? w.perm.ptr() : DevicePtr{};
  const auto [input, xscale] = prepared_input(backend, w, x, perm, offsets, rows, w.batch, scratch, stream);
  launch_grouped(backend, w, input, xscale, offsets, y, stream);
}

}  // namespace metrale::layers
