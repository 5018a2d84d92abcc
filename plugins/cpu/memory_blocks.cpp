// SPDX-License-Identifier: MIT OR Apache-2.0
#include "memory_blocks.hpp"

#include <sys/mman.h>

#include <cstdlib>

namespace metrale::cpu {

size_t block_bytes(size_t bytes) noexcept {
  const size_t alignment = bytes >= kHugePage ? kHugePage : kBlockAlignment;
  return (bytes + alignment - 1) / alignment * alignment;
}

void* allocate_block(size_t bytes) noexcept {
  const size_t rounded = block_bytes(bytes);
  if (bytes < kHugePage) return std::aligned_alloc(kBlockAlignment, rounded);
  // Map a huge page more than needed, then give back what lies before and after the aligned block.
  void* mapped = ::mmap(nullptr, rounded + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) ::munmap(mapped, aligned - start);
  const uintptr_t end = start + rounded + kHugePage;
  if (end > aligned + rounded) ::munmap(reinterpret_cast<void*>(aligned + rounded), end - (aligned + rounded));
  return reinterpret_cast<void*>(aligned);
}

void free_block(uint64_t address, size_t bytes) noexcept {
  if (bytes < kHugePage) std::free(reinterpret_cast<void*>(address));
  else ::munmap(reinterpret_cast<void*>(address), block_bytes(bytes));
}

}  // namespace metrale::cpu
