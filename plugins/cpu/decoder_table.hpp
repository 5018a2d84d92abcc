// SPDX-License-Identifier: MIT OR Apache-2.0
// The decoder's small kernels the CPU backend provides (docs/kernels.md, modules norm, rope and
// embed): names, parameter lists and launch validation; kernel_table.cpp lists them last.
#pragma once

#include "kernel_table.hpp"

#include <span>

namespace metrale::cpu {

std::span<const KernelSpec> decoder_kernel_specs();

}  // namespace metrale::cpu
