// SPDX-License-Identifier: MIT OR Apache-2.0
#include "core/device_quant_matrix.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/status.hpp>

#include <utility>

namespace metrale::layers {

namespace {

constexpr auto kW4a16RepackSignature = catalogue::signature("w4a16", "w4a16_repack");
constexpr uint32_t kRepackRowsPerBlock = 64;

}  // namespace

KernelHandle resolve_w4a16_repack(Backend& backend, std::source_location site, const LookupNotes& notes) {
  return backend.lookup("w4a16", "w4a16_repack", noted_request(notes, LookupKind::try_lookup, kW4a16RepackSignature), site);
}

std::string weight_layout_of(const Backend& backend, KernelHandle kernel, std::string_view canonical) {
  if (!kernel) return std::string(canonical);
  return backend.manifest_entry(kernel).weight_layout.value_or(std::string(canonical));
}

void require_weight_layout(const Backend& backend, KernelHandle kernel, std::string_view layout,
                           std::string_view canonical, std::string_view repack) {
  if (!kernel) return;
  const std::string expected = weight_layout_of(backend, kernel, canonical);
  if (expected == layout) return;
  throw Error(Status::incompatible,
              backend.kernel_name(kernel) + " on backend '" + backend.name() + "' reads its weights in layout '" + expected +
                  "', but the weights are in layout '" + std::string(layout) + "'; the backend must declare " +
                  std::string(repack) + " with \"weight_layout\": \"" + expected +
                  "\" in its manifest, so the weights are repacked into that layout at load (docs/manifest.md)");
}

namespace {

void launch_repack(Backend& backend, const DeviceQuantMatrix& d, KernelHandle repack, DeviceBuffer& qweight,
                   DeviceBuffer& scales, DeviceBuffer& zeros) {
  LaunchShape shape;
  shape.grid = {(d.n + kRepackRowsPerBlock - 1) / kRepackRowsPerBlock, d.batch, 1};
  shape.block = {128, 1, 1};
  if (weight_format_has_zeros(d.format)) {
    backend.launch(repack, shape, d.qweight.ptr(), d.scales.ptr(), d.zeros.ptr(), qweight.ptr(), scales.ptr(), zeros.ptr(),
                   d.n, d.k, d.group, d.batch);
  } else if (!weight_format_has_scales(d.format)) {
    // bf16_repack and f16_repack: (weight_in, weight_out, n, k, count).
    backend.launch(repack, shape, d.qweight.ptr(), qweight.ptr(), d.n, d.k, d.batch);
  } else {
    // w4a16_repack and fp8_repack: (qweight_in, scales_in, qweight_out, scales_out, n, k, count).
    backend.launch(repack, shape, d.qweight.ptr(), d.scales.ptr(), qweight.ptr(), scales.ptr(), d.n, d.k, d.batch);
  }
}

}  // namespace

DeviceQuantMatrix DeviceQuantMatrix::upload(Backend& backend, const QuantMatrix& matrix, KernelHandle repack) {
  matrix.validate();
  DeviceQuantMatrix d;
  d.name = matrix.name;
  d.format = matrix.format;
  d.batch = matrix.batch;
  d.n = matrix.n;
  d.k = matrix.k;
  d.group = matrix.group;
  d.layout = weight_format_name(matrix.format);
  d.qweight = DeviceBuffer(backend, matrix.qweight_bytes());
  d.qweight.upload(std::span<const uint32_t>(matrix.qweight));
  d.scales = DeviceBuffer(backend, matrix.scales_bytes());
  if (matrix.format == WeightFormat::w4a16) {
    d.scales.upload(std::span<const uint16_t>(matrix.scales));
  } else {
    d.scales.upload(std::span<const float>(matrix.scales32));
  }
  if (weight_format_has_zeros(matrix.format)) {
    d.zeros = device_copy(backend, matrix.zeros);
  }
  if (!matrix.perm.empty()) {
    d.act_order = true;
    d.perm = device_copy(backend, matrix.perm);
  }
  if (!matrix.input_scales.empty()) {
    d.input_scales = device_copy(backend, matrix.input_scales);
  }
  if (!repack) return d;
  // Same byte sizes in and out (docs/kernels.md), and the two never alias: fresh buffers.
  DeviceBuffer qweight(backend, d.qweight.bytes());
  DeviceBuffer scales(backend, d.scales.bytes());
  DeviceBuffer zeros;
  if (weight_format_has_zeros(d.format)) zeros = DeviceBuffer(backend, d.zeros.bytes());
  launch_repack(backend, d, repack, qweight, scales, zeros);
  backend.synchronize();  // the canonical buffers are freed next
  d.qweight = std::move(qweight);
  d.scales = std::move(scales);
  if (weight_format_has_zeros(d.format)) d.zeros = std::move(zeros);
  d.layout = weight_layout_of(backend, repack, weight_format_name(d.format));
  return d;
}

DeviceQuantMatrix DeviceQuantMatrix::upload(Backend& backend, const QuantMatrix& matrix, std::source_location site) {
  return upload(backend, matrix, resolve_w4a16_repack(backend, site));
}

}  // namespace metrale::layers
