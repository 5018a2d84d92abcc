// SPDX-License-Identifier: MIT OR Apache-2.0
// The deltanet module the CPU backend provides (docs/kernels.md, "Module deltanet"): names,
// parameter lists and launch validation; kernel_table.cpp lists them after the decoder's.
#pragma once

#include "kernel_table.hpp"

#include <span>

namespace metrale::cpu {

std::span<const KernelSpec> deltanet_kernel_specs();

}  // namespace metrale::cpu
