// SPDX-License-Identifier: MIT OR Apache-2.0
// Reader for the CUBINs NVRTC produces (64-bit little-endian ELF): the kernel symbols of
// .symtab/.strtab, and from the .nv.info sections each kernel's register count and parameter
// layout. The plugin uses it to check a compiled module against the manifest; the fake driver
// uses it to answer cuModuleGetFunction and to size launch arguments like a real driver would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::cuda {

// Thrown for bytes that are not a well-formed 64-bit ELF image.
class CubinError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CubinParam {
  uint32_t ordinal = 0;  // position in the parameter list
  uint32_t offset = 0;   // byte offset in the parameter buffer
  uint32_t size = 0;     // bytes
};

struct CubinKernel {
  std::string name;
  std::optional<uint32_t> registers;  // EIATTR_REGCOUNT
  std::vector<CubinParam> params;     // EIATTR_KPARAM_INFO, sorted by ordinal
  std::optional<uint32_t> param_bytes;  // EIATTR_CBANK_PARAM_SIZE
};

struct CubinInfo {
  uint16_t machine = 0;        // e_machine (190 = EM_CUDA)
  uint32_t sm = 0;             // the architecture the code is for, from e_flags: 80, 90, 120...
  std::vector<CubinKernel> kernels;
  const CubinKernel* find(std::string_view name) const;
};

// True when the bytes start with the ELF magic (what a CUBIN is; PTX is text).
bool is_elf(std::span<const std::byte> image) noexcept;

// The size of an ELF image from its headers alone (what a driver handed a bare pointer must
// do): the furthest end of the section headers, program headers and sections. The caller
// vouches that the pointer is an ELF image; 0 when the header is inconsistent.
size_t elf_image_size(const std::byte* image) noexcept;

// Parses the image; throws CubinError naming what is malformed.
CubinInfo read_cubin(std::span<const std::byte> image);

}  // namespace metrale::cuda
