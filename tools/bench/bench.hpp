// SPDX-License-Identifier: MIT OR Apache-2.0
// Kernel-variant bench: every kernel of a backend whose name matches a glob and that is a GEMV or
// GEMM of a documented family: the w4a16 family's signature (x, qweight, scales, y, m, n, k), or
// the <module>_gemv / <module>_gemm (and fp8_gemm_a8) of the quantized families w4a16_zp, w8a16,
// fp8, w4a8 and w8a8 (docs/kernels.md), on a list of shapes. Each variant runs on synthetic
// weights of its family's format (layers/core/quant_synthetic.hpp), its inputs quantized first
// under an int8/fp8 family (the quantize launch is not timed), and is verified against the
// double-precision reference of its tier with the layers' own tolerance (layers/reference/reference.hpp:
// reference_projection + compare_to_reference), on a stated subset of output columns so the
// reference does not dominate on big shapes, then timed (warm-ups, then median/min/max of
// repeats). Used by `metrale bench` (docs/kernel-developer.md).
#pragma once

#include "linear/family.hpp"

#include <metrale/backend.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace metrale::bench {

struct Shape {
  std::string label;  // "ffn.gate_up", "custom"
  uint32_t m = 1;
  uint32_t n = 0;
  uint32_t k = 0;
};

// The FFN projection shapes of a preset or config.json (dense: gate_up [2I, H] and down [H, I];
// MoE: one expert's gate_up and down, and the shared expert's when there is one), for each m.
std::vector<Shape> model_shapes(const std::string& preset_or_path, const std::vector<uint32_t>& ms);

// How a variant's grid is computed (docs/kernels.md).
struct GridConvention {
  uint32_t max_m = 0;   // 0: any number of rows
  uint32_t n_tile = 128;
  uint32_t m_tile = 64;  // 0: grid y = 1
  uint32_t block = 128;
  bool documented = true;  // false: not in docs/kernels.md, the N128xM64 tile grid is assumed
};
GridConvention grid_convention(const std::string& module, const std::string& name);

// A kernel of the backend's manifest that the glob selected.
struct Variant {
  std::string module;
  std::string name;
  layers::KernelFamily family = layers::KernelFamily::w4a16;
  std::string full_name() const { return module + "/" + name; }
  // "<activations>/<family module>": "bf16/w4a16", "int8/w8a8" (docs/quantization.md).
  std::string tier() const;
};

// Kernels of `backend`'s manifest that are variants (the w4a16 signature, names and types, or a
// documented GEMV/GEMM of a quantized family) and whose name or "module/name" matches `glob`, in
// manifest order.
std::vector<Variant> matching_variants(const Backend& backend, const std::string& glob);
// Every variant kernel (for messages when nothing matched).
std::vector<Variant> family_variants(const Backend& backend);

enum class Disposition { passed, incorrect, not_supported, not_run };
const char* disposition_name(Disposition d) noexcept;  // "passed", "incorrect", "not-supported", "not-run"

struct Options {
  uint32_t warmup = 1;
  uint32_t repeat = 5;
  // Output columns verified per shape: evenly spaced, first and last included; 0 = every column.
  uint32_t verify_columns = 256;
  uint64_t seed = 1;
};

struct Row {
  std::string backend;
  std::string target;
  Variant variant;
  Shape shape;
  Disposition disposition = Disposition::not_run;
  std::string why;  // for every disposition but passed; also the assumed-grid note
  // Timing (when the variant ran).
  std::vector<double> seconds;
  double median_s = 0, min_s = 0, max_s = 0;
  double weight_bytes = 0;  // every weight tensor of the [n, k] matrix (codes, scales, zero points)
  double flops = 0;         // 2 m n k
  double gb_per_s = 0, gflop_per_s = 0;
  std::optional<double> ratio;  // baseline median / this median (> 1: faster than the baseline)
  // Verification.
  uint32_t columns_checked = 0;
  size_t checked = 0, violations = 0;
  double max_abs = 0, max_rel = 0, worst_ratio = 0;
  std::string check_summary;
};

// Runs every variant on every shape; `baseline` (a kernel name or module/name, may be empty)
// fills Row::ratio for rows of the same backend and shape.
std::vector<Row> run(Backend& backend, const std::vector<Variant>& variants, const std::vector<Shape>& shapes,
                     const Options& options, const std::string& baseline);

}  // namespace metrale::bench
