// SPDX-License-Identifier: MIT OR Apache-2.0
// The bench's inner steps (bench.hpp): a variant resolved once per backend, the weights, inputs
// and reference of one shape under one family, and the verify-then-time measurement of a launch.
#pragma once

#include "bench/bench.hpp"

#include "core/device_quant_matrix.hpp"
#include "linear/family.hpp"
#include "reference/reference.hpp"

#include <functional>
#include <map>
#include <optional>
#include <tuple>

namespace metrale::bench {

// A variant as resolved on its backend: its handle, and for a quantized family the family's
// kernels with this variant serving every m (gemv) or the GEMM without a GEMV.
struct Resolved {
  KernelHandle handle;
  layers::FamilyKernels kernels;
  KernelHandle repack;                 // w4a16 variants: the backend's w4a16 repack
  std::optional<Disposition> blocked;  // not_supported (missing) or not_run (a layout it cannot read)
  std::string why;
};

// Resolves every variant: w4a16 ones with a try lookup of the family's signature, the others
// through layers::resolve_family once per family.
std::vector<Resolved> resolve_variants(Backend& backend, const std::vector<Variant>& variants);

// Host weights by (format, n, k): one matrix per projection shape and format.
using WeightCache = std::map<std::tuple<layers::WeightFormat, uint32_t, uint32_t>, layers::QuantMatrix>;

// One shape under one family: weights (host and device), the input (quantized on the device under
// an int8/fp8 family), the verified columns and their reference, a poisoned output with a guard row.
struct Fixture {
  layers::QuantMatrix w;
  std::vector<uint16_t> x;
  std::vector<uint32_t> cols;
  layers::ReferenceOutput reference;
  layers::DeviceQuantMatrix dw;
  layers::DeviceBuffer dx, dxq, dxscale, dy;
};
Fixture make_fixture(Backend& backend, const Shape& shape, const Options& options, const Resolved& resolved,
                     layers::KernelFamily family, WeightCache& weights);

// Verifies one launch on `f` into `row` (disposition, error), then times it (unless it failed).
void measure(Backend& backend, const std::function<void()>& launch, const Fixture& f, const Shape& shape,
             const Options& options, Row& row);

}  // namespace metrale::bench
