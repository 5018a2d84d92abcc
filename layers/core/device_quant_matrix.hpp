// SPDX-License-Identifier: MIT OR Apache-2.0
// A W4A16 (or zero-point, or FP8) matrix or stack uploaded into device memory, and the weight
// layouts its kernels read (docs/kernels.md). Owned by the layer that uploads it; the Backend
// must outlive it.
#pragma once

#include "core/device_buffer.hpp"
#include "core/lookup_notes.hpp"
#include "core/quant_matrix.hpp"

#include <metrale/backend.hpp>

#include <cstddef>
#include <source_location>
#include <string>
#include <string_view>

namespace metrale::layers {

// The W4A16 layout of docs/kernels.md. A kernel whose manifest entry names no weight_layout
// reads its family's canonical layout: this one for the w4a16 module.
inline constexpr std::string_view kCanonicalW4a16Layout = "w4a16-nk-g128";

// The backend's w4a16/w4a16_repack (a try lookup: one audit row at `site`, carrying `notes`), or
// the null handle when it declares none and keeps the canonical layout.
KernelHandle resolve_w4a16_repack(Backend& backend, std::source_location site = std::source_location::current(),
                                  const LookupNotes& notes = {});

// The layout `kernel` reads or, for a repack kernel, writes: its manifest weight_layout; else
// `canonical` (the entry names none, or `kernel` is null: no repack, the bytes stay canonical).
std::string weight_layout_of(const Backend& backend, KernelHandle kernel,
                             std::string_view canonical = kCanonicalW4a16Layout);

// Throws Error(incompatible) unless `kernel` reads weights in `layout` (a null kernel reads
// nothing and passes). The message names the kernel, both layouts and the fix (`repack`, the
// family's repack kernel, producing the layout). Layers call it once per kernel when they
// resolve, never per launch.
void require_weight_layout(const Backend& backend, KernelHandle kernel, std::string_view layout,
                           std::string_view canonical = kCanonicalW4a16Layout,
                           std::string_view repack = "w4a16/w4a16_repack");

// A quantized matrix (or stack) on the device, in the layout `layout` names: the byte sizes and
// per-matrix offsets of docs/kernels.md whatever the layout, the contents readable only by
// kernels that declare that layout. `perm` holds the act-order permutation (i32 [batch][k]) when
// the matrix has one.
struct DeviceQuantMatrix {
  std::string name;
  WeightFormat format = WeightFormat::w4a16;
  uint32_t batch = 1;
  uint32_t n = 0;
  uint32_t k = 0;
  uint32_t group = kW4a16GroupSize;
  DeviceBuffer qweight;
  DeviceBuffer scales;
  DeviceBuffer zeros;  // zero-point formats only
  DeviceBuffer perm;   // act-order only
  DeviceBuffer input_scales;  // static activation scales, f32 [batch]; empty: none
  bool act_order = false;
  std::string layout{kCanonicalW4a16Layout};

  // Uploads the canonical bytes; with a non-null `repack` (the format's module repack: w4a16,
  // w4a16_zp/w4a8, w8a16/w8a8 or fp8 signature, docs/kernels.md) runs it once over the whole
  // stack into fresh buffers, waits, frees the canonical ones and takes the repack's layout.
  static DeviceQuantMatrix upload(Backend& backend, const QuantMatrix& matrix, KernelHandle repack);
  // A w4a16 matrix with the backend's own w4a16 repack, looked up at `site`.
  static DeviceQuantMatrix upload(Backend& backend, const QuantMatrix& matrix,
                                  std::source_location site = std::source_location::current());
  size_t qweight_bytes_per_matrix() const noexcept { return size_t{n} * k * weight_format_bits(format) / 8; }
  size_t scale_bytes_per_matrix() const noexcept {
    return size_t{n} * (k / group) * (format == WeightFormat::w4a16 ? 2 : 4);
  }
  size_t zero_bytes_per_matrix() const noexcept { return weight_format_has_zeros(format) ? size_t{n} * (k / group) : 0; }
  DevicePtr qweight_of(uint32_t index) const noexcept { return qweight.at(index * qweight_bytes_per_matrix()); }
  DevicePtr scales_of(uint32_t index) const noexcept { return scales.at(index * scale_bytes_per_matrix()); }
  DevicePtr zeros_of(uint32_t index) const noexcept { return zeros.at(index * zero_bytes_per_matrix()); }
  size_t bytes_per_matrix() const noexcept {
    return qweight_bytes_per_matrix() + scale_bytes_per_matrix() + zero_bytes_per_matrix();
  }
};

}  // namespace metrale::layers
