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

std::pair<DevicePtr, DevicePtr> LinearPlan::quantized_input(Backend& backend, DevicePtr x, uint32_t rows, uint32_t k,
                                                            ProjectionScratch& scratch, uint64_t stream) const {
  if (!kernels_.quantize) return {x, DevicePtr{}};
  scratch.quantized.ensure(backend, size_t{rows} * k);
  scratch.scales.ensure(backend, size_t{rows} * sizeof(float));
  launch_quantize(backend, kernels_, x, scratch.quantized.ptr(), scratch.scales.ptr(), rows, k, stream);
  return {scratch.quantized.ptr(), scratch.scales.ptr()};
}

void LinearPlan::run(Backend& backend, const DeviceQuantMatrix& w, uint32_t index, DevicePtr x, DevicePtr y, uint32_t m,
                     ProjectionScratch& scratch, uint64_t stream) const {
  DevicePtr in = x;
  if (w.act_order) {
    scratch.gathered.ensure(backend, size_t{m} * w.k * 2);
    if (scratch.offsets_rows != m) {
      scratch.offsets.ensure(backend, 2 * sizeof(int32_t));
      const std::array<int32_t, 2> offsets{0, static_cast<int32_t>(m)};
      scratch.offsets.upload(std::span<const int32_t>(offsets), 0, stream);
      scratch.offsets_rows = m;
    }
    launch_gather(backend, kernels_, x, w.perm.at(size_t{index} * w.k * sizeof(int32_t)), scratch.offsets.ptr(),
                  scratch.gathered.ptr(), m, w.k, 1, stream);
    in = scratch.gathered.ptr();
  }
  const auto [input, xscale] = quantized_input(backend, in, m, w.k, scratch, stream);
  launch(backend, w, index, input, xscale, y, m, stream);
}

void LinearPlan::run_grouped(Backend& backend, const DeviceQuantMatrix& w, DevicePtr x, DevicePtr offsets, DevicePtr y,
                             uint32_t rows, ProjectionScratch& scratch, uint64_t stream) const {
  DevicePtr in = x;
  if (w.act_order) {
    scratch.gathered.ensure(backend, size_t{rows} * w.k * 2);
    launch_gather(backend, kernels_, x, w.perm.ptr(), offsets, scratch.gathered.ptr(), rows, w.k, w.batch, stream);
    in = scratch.gathered.ptr();
  }
  const auto [input, xscale] = quantized_input(backend, in, rows, w.k, scratch, stream);
  launch_grouped(backend, w, input, xscale, offsets, y, stream);
}

}  // namespace metrale::layers
