// SPDX-License-Identifier: MIT OR Apache-2.0
// The decoder's small kernels the CPU backend provides (docs/kernels.md, modules norm, rope, embed,
// sample, and attn's output_gate): names, parameter lists and launch validation; kernel_table.cpp
// lists them after attn's.
#pragma once

#include "kernel_table.hpp"

#include <span>

namespace metrale::cpu {

std::span<const KernelSpec> decoder_kernel_specs();

}  // namespace metrale::cpu
