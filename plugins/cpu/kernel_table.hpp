// SPDX-License-Identifier: MIT OR Apache-2.0
// The kernels the CPU backend provides: names, parameter lists (as docs/kernels.md states them
// and manifests/cpu.json lists them), the launch-time validation of each, and its bodies.
#pragma once

#include "kernels.hpp"
#include "target.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/plugin_abi.h>

#include <cstdint>
#include <span>
#include <string>

namespace metrale::cpu {

// What validation may ask about memory: how many bytes from `address` to the end of the live
// allocation holding it (0 when none holds it).
class MemoryView {
 public:
  virtual uint64_t extent(uint64_t address) const = 0;

 protected:
  ~MemoryView() = default;
};

// The blocks of the grid that do work: a launch must cover them; extra blocks would only clip.
struct BlockRange {
  uint32_t x = 0;
  uint32_t y = 0;
  // When set (grouped GEMM), row `by` of the grid does work only if y_offsets[by + 1] >
  // y_offsets[by]: the launch skips experts without rows instead of handing out their blocks
  // (a MoE decode step touches 8 of 128 experts; 15/16 of its blocks would return at once).
  const int32_t* y_offsets = nullptr;
};

using Validator = metrale_status (*)(const KernelArgs& args, const MemoryView& memory,
                                     BlockRange& needed, std::string& error);

struct KernelSpec {
  const char* module;
  const char* name;
  const char* const* param_names;
  const metrale_param_type* param_types;
  uint32_t param_count;
  Validator validate;
  BlockFn baseline;
  int simd_slot;  // a Simd (kernels.hpp) when a SIMD tier may replace `baseline`, else -1
  const char* grid_rule;  // for messages: "(ceil(n/64), 1)"
};

// A KernelSpec's module, name and parameters for the documented kernel `module`/`kernel`: the
// tables write no parameter list, manifests/catalogue.json does (the generated header).
#define METRALE_CPU_KERNEL(module, kernel)                                                            \
  #module, #kernel, METRALE_CATALOGUE_NAMES(module, kernel), METRALE_CATALOGUE_TYPES(module, kernel), \
      METRALE_CATALOGUE_PARAM_COUNT(module, kernel)

std::span<const KernelSpec> kernel_specs();
// The same, as the ABI's descriptors (static storage).
std::span<const metrale_kernel_desc> kernel_descs();
// The body a tier runs for kernel `index` on a CPU with `features`. Call only with a tier this
// CPU supports.
BlockFn kernel_body(size_t index, Tier tier, const CpuFeatures& features);

}  // namespace metrale::cpu
