// SPDX-License-Identifier: MIT OR Apache-2.0
// The attn module of docs/kernels.md ("Attention"): kv_append, attn_decode, attn_decode_combine
// and attn_prefill over the paged bf16 KV cache. Names, parameter lists and launch validation;
// kernel_table.cpp lists them after the quantized families.
#pragma once

#include "kernel_table.hpp"

#include <span>

namespace metrale::cpu {

std::span<const KernelSpec> attn_kernel_specs();

}  // namespace metrale::cpu
