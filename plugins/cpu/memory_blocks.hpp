// SPDX-License-Identifier: MIT OR Apache-2.0
// The CPU backend's device memory: blocks of host memory. Weight-sized blocks (kHugePage and up)
// are mappings of their own on 2 MiB boundaries (for transparent huge pages): freed, they go back
// to the system at once. From malloc's heap a freed block stays resident until reused, which kept
// a model load's transient copies (the canonical bytes before a repack) in the process's peak
// memory. Smaller blocks come from the heap, 64-byte aligned.
#pragma once

#include <cstddef>
#include <cstdint>

namespace metrale::cpu {

inline constexpr size_t kBlockAlignment = 64;
inline constexpr size_t kHugePage = size_t{2} << 20;

// The bytes a block of `bytes` occupies (rounded to its alignment).
size_t block_bytes(size_t bytes) noexcept;
// A block of `bytes` (> 0), or nullptr when the system has no memory for it.
void* allocate_block(size_t bytes) noexcept;
// Frees what allocate_block(bytes) returned.
void free_block(uint64_t address, size_t bytes) noexcept;

}  // namespace metrale::cpu
