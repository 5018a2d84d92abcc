// SPDX-License-Identifier: MIT OR Apache-2.0
// The kernels of docs/kernels.md's "Quantized weight families beyond W4A16" that the CPU backend
// provides: modules w4a16_zp, w8a16, fp8, w4a8, w8a8, quant, and moe/moe_align. Their names,
// parameter lists and launch validation; kernel_table.cpp lists them after the others.
#pragma once

#include "kernel_table.hpp"

#include <span>

namespace metrale::cpu {

std::span<const KernelSpec> quant_kernel_specs();

}  // namespace metrale::cpu
