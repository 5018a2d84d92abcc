// SPDX-License-Identifier: MIT OR Apache-2.0
// The compile extension of cuda_compile.h: compile the manifest's modules for a named target, with
// no driver involved. Offered through the table's get_proc_address, not as exported symbols.
#pragma once

namespace metrale::cuda {

// The extension entry point of that name (METRALE_CUDA_COMPILE_NAME, ..._FREE_NAME), or nullptr.
void* compile_extension(const char* name) noexcept;

}  // namespace metrale::cuda
