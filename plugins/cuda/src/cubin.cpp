// SPDX-License-Identifier: MIT OR Apache-2.0
#include "cubin.hpp"

#include <algorithm>
#include <cstring>
#include <map>

namespace metrale::cuda {
namespace {

// ELF64 constants (System V ABI) and the NVIDIA additions seen in CUBINs.
constexpr uint8_t kElfClass64 = 2;
constexpr uint8_t kElfDataLsb = 1;
constexpr uint32_t kShtSymtab = 2;
constexpr uint8_t kSttFunc = 2;
constexpr uint8_t kStbGlobal = 1;
constexpr uint8_t kStoCudaEntry = 0x10;  // st_other bit marking a __global__ entry
constexpr size_t kShdrSize = 64;
constexpr size_t kSymSize = 24;

// .nv.info attribute records: {u8 format, u8 attribute, ...}. SVAL carries a u16 length and
// that many bytes; every other format is 4 bytes in total.
constexpr uint8_t kFmtSval = 0x04;
constexpr uint8_t kAttrParamCbank = 0x0a;
constexpr uint8_t kAttrKparamInfo = 0x17;
constexpr uint8_t kAttrCbankParamSize = 0x19;
constexpr uint8_t kAttrRegcount = 0x2f;

// Bounds-checked little-endian reads: a truncated or lying image throws instead of reading
// past the buffer.
class Bytes {
 public:
  explicit Bytes(std::span<const std::byte> data) : data_(data) {}
  size_t size() const { return data_.size(); }
  template <class T>
  T read(size_t offset, const char* what) const {
    if (offset > data_.size() || data_.size() - offset < sizeof(T)) {
      throw CubinError(std::string("truncated ELF image reading ") + what);
    }
    T value{};
    std::memcpy(&value, data_.data() + offset, sizeof(T));
    return value;  // CUBINs are little-endian, as is every host we build for
  }
  std::span<const std::byte> slice(size_t offset, size_t length, const char* what) const {
    if (offset > data_.size() || data_.size() - offset < length) {
      throw CubinError(std::string("ELF section out of bounds: ") + what);
    }
    return data_.subspan(offset, length);
  }

 private:
  std::span<const std::byte> data_;
};

struct Section {
  uint32_t name = 0;
  uint32_t type = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t link = 0;
  uint32_t info = 0;
  uint64_t entsize = 0;
};

std::string string_at(std::span<const std::byte> table, uint32_t offset, const char* what) {
  if (offset >= table.size()) throw CubinError(std::string("string offset out of range in ") + what);
  const char* begin = reinterpret_cast<const char*>(table.data()) + offset;
  const void* end = std::memchr(begin, 0, table.size() - offset);
  if (end == nullptr) throw CubinError(std::string("unterminated string in ") + what);
  return std::string(begin, static_cast<const char*>(end));
}

struct Attribute {
  uint8_t attr = 0;
  std::span<const std::byte> value;  // SVAL payload, or the 2 bytes after the header
};

std::vector<Attribute> read_attributes(std::span<const std::byte> section, const std::string& name) {
  std::vector<Attribute> out;
  Bytes bytes(section);
  size_t pos = 0;
  while (pos < section.size()) {
    const auto format = bytes.read<uint8_t>(pos, name.c_str());
    const auto attr = bytes.read<uint8_t>(pos + 1, name.c_str());
    if (format == kFmtSval) {
      const auto length = bytes.read<uint16_t>(pos + 2, name.c_str());
      out.push_back({attr, bytes.slice(pos + 4, length, name.c_str())});
      pos += 4 + size_t{length};
    } else {
      out.push_back({attr, bytes.slice(pos + 2, 2, name.c_str())});
      pos += 4;
    }
  }
  return out;
}

template <class T>
T value_at(std::span<const std::byte> value, size_t offset) {
  return Bytes(value).read<T>(offset, "attribute value");
}

}  // namespace

const CubinKernel* CubinInfo::find(std::string_view name) const {
  for (const auto& kernel : kernels) {
    if (kernel.name == name) return &kernel;
  }
  return nullptr;
}

bool is_elf(std::span<const std::byte> image) noexcept {
  static constexpr unsigned char kMagic[4] = {0x7f, 'E', 'L', 'F'};
  return image.size() >= 4 && std::memcmp(image.data(), kMagic, 4) == 0;
}

size_t elf_image_size(const std::byte* image) noexcept {
  const auto u16 = [&](size_t at) {
    uint16_t v;
    std::memcpy(&v, image + at, 2);
    return v;
  };
  const auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, image + at, 8);
    return v;
  };
  if (image == nullptr || !is_elf({image, 64}) || static_cast<uint8_t>(image[4]) != kElfClass64) return 0;
  const uint64_t phoff = u64(0x20);
  const uint64_t shoff = u64(0x28);
  const uint16_t phentsize = u16(0x36);
  const uint16_t phnum = u16(0x38);
  const uint16_t shentsize = u16(0x3a);
  const uint16_t shnum = u16(0x3c);
  if (shentsize != kShdrSize) return 0;
  uint64_t end = 64;
  end = std::max<uint64_t>(end, phoff + uint64_t{phnum} * phentsize);
  end = std::max<uint64_t>(end, shoff + uint64_t{shnum} * shentsize);
  constexpr uint32_t kShtNobits = 8;  // occupies no bytes in the file
  for (size_t i = 0; i < shnum; ++i) {
    const size_t at = shoff + i * kShdrSize;
    uint32_t type;
    std::memcpy(&type, image + at + 4, 4);
    if (type == kShtNobits) continue;
    end = std::max<uint64_t>(end, u64(at + 24) + u64(at + 32));
  }
  return static_cast<size_t>(end);
}

namespace {

// The section header table; `shnum` entries of kShdrSize bytes from `shoff`.
std::vector<Section> read_sections(const Bytes& bytes, uint64_t shoff, uint16_t shnum) {
  std::vector<Section> sections(shnum);
  for (size_t i = 0; i < shnum; ++i) {
    const size_t at = shoff + i * kShdrSize;
    auto& s = sections[i];
    s.name = bytes.read<uint32_t>(at + 0, "section header");
    s.type = bytes.read<uint32_t>(at + 4, "section header");
    s.offset = bytes.read<uint64_t>(at + 24, "section header");
    s.size = bytes.read<uint64_t>(at + 32, "section header");
    s.link = bytes.read<uint32_t>(at + 40, "section header");
    s.info = bytes.read<uint32_t>(at + 44, "section header");
    s.entsize = bytes.read<uint64_t>(at + 56, "section header");
  }
  return sections;
}

// Kernels are the global FUNC symbols flagged as CUDA entries: appended to `kernels`, and
// returned as symbol index -> kernels[] position.
std::map<uint32_t, size_t> read_kernel_symbols(const Bytes& bytes, const std::vector<Section>& sections,
                                               std::vector<CubinKernel>& kernels) {
  std::map<uint32_t, size_t> kernel_by_symbol;
  for (const auto& s : sections) {
    if (s.type != kShtSymtab) continue;
    if (s.entsize != kSymSize) throw CubinError("unexpected symbol entry size");
    if (s.link >= sections.size()) throw CubinError("symbol string table index out of range");
    const auto symtab = bytes.slice(s.offset, s.size, ".symtab");
    const auto strtab = bytes.slice(sections[s.link].offset, sections[s.link].size, ".strtab");
    Bytes syms(symtab);
    for (size_t i = 0; i < symtab.size() / kSymSize; ++i) {
      const size_t at = i * kSymSize;
      const auto st_name = syms.read<uint32_t>(at, "symbol");
      const auto st_info = syms.read<uint8_t>(at + 4, "symbol");
      const auto st_other = syms.read<uint8_t>(at + 5, "symbol");
      if ((st_info & 0xf) != kSttFunc || (st_info >> 4) != kStbGlobal) continue;
      if ((st_other & kStoCudaEntry) == 0) continue;
      kernel_by_symbol[static_cast<uint32_t>(i)] = kernels.size();
      kernels.push_back({string_at(strtab, st_name, ".strtab"), std::nullopt, {}, std::nullopt});
    }
  }
  return kernel_by_symbol;
}

// .nv.info: module-wide attributes keyed by symbol index, {u32 symbol, u32 value}.
void apply_module_attributes(std::span<const std::byte> section, const std::string& name,
                             const std::map<uint32_t, size_t>& kernel_by_symbol,
                             std::vector<CubinKernel>& kernels) {
  for (const auto& a : read_attributes(section, name)) {
    if (a.attr != kAttrRegcount || a.value.size() < 8) continue;
    const auto it = kernel_by_symbol.find(value_at<uint32_t>(a.value, 0));
    if (it != kernel_by_symbol.end()) kernels[it->second].registers = value_at<uint32_t>(a.value, 4);
  }
}

// .nv.info.<kernel>: the kernel's parameter layout and parameter bank size.
void apply_kernel_attributes(std::span<const std::byte> section, const std::string& name, CubinKernel& kernel) {
  for (const auto& a : read_attributes(section, name)) {
    if (a.attr == kAttrKparamInfo) {
      // {u32 index, u16 ordinal, u16 offset, u32 flags}; the size is flags bits 18..31.
      if (a.value.size() < 12) throw CubinError("short KPARAM_INFO in " + name);
      const auto flags = value_at<uint32_t>(a.value, 8);
      kernel.params.push_back({value_at<uint16_t>(a.value, 4), value_at<uint16_t>(a.value, 6),
                               (flags >> 18) & 0x3fffu});
    } else if (a.attr == kAttrCbankParamSize) {
      kernel.param_bytes = value_at<uint16_t>(a.value, 0);
    } else if (a.attr == kAttrParamCbank && !kernel.param_bytes && a.value.size() >= 8) {
      kernel.param_bytes = value_at<uint16_t>(a.value, 6);
    }
  }
  std::sort(kernel.params.begin(), kernel.params.end(),
            [](const CubinParam& a, const CubinParam& b) { return a.ordinal < b.ordinal; });
}

}  // namespace

CubinInfo read_cubin(std::span<const std::byte> image) {
  if (!is_elf(image)) throw CubinError("not an ELF image (bad magic)");
  Bytes bytes(image);
  if (bytes.read<uint8_t>(4, "e_ident") != kElfClass64) throw CubinError("not a 64-bit ELF image");
  if (bytes.read<uint8_t>(5, "e_ident") != kElfDataLsb) throw CubinError("not a little-endian ELF image");

  CubinInfo info;
  info.machine = bytes.read<uint16_t>(0x12, "e_machine");
  // EF_CUDA_SM: bits 8..15 of e_flags from ELF ABI version 8 on (CUDA 12.8+), bits 0..7 before.
  const auto flags = bytes.read<uint32_t>(0x30, "e_flags");
  info.sm = bytes.read<uint8_t>(8, "e_ident") >= 8 ? (flags >> 8) & 0xffu : flags & 0xffu;
  const auto shoff = bytes.read<uint64_t>(0x28, "e_shoff");
  const auto shentsize = bytes.read<uint16_t>(0x3a, "e_shentsize");
  const auto shnum = bytes.read<uint16_t>(0x3c, "e_shnum");
  const auto shstrndx = bytes.read<uint16_t>(0x3e, "e_shstrndx");
  if (shentsize != kShdrSize) throw CubinError("unexpected section header size");
  if (shstrndx >= shnum) throw CubinError("section name table index out of range");

  const std::vector<Section> sections = read_sections(bytes, shoff, shnum);
  const auto section_data = [&](const Section& s, const char* what) {
    return bytes.slice(s.offset, s.size, what);
  };
  const auto shstrtab = section_data(sections[shstrndx], ".shstrtab");
  const auto kernel_by_symbol = read_kernel_symbols(bytes, sections, info.kernels);

  for (const auto& s : sections) {
    const std::string name = string_at(shstrtab, s.name, ".shstrtab");
    if (name == ".nv.info") {
      apply_module_attributes(section_data(s, ".nv.info"), name, kernel_by_symbol, info.kernels);
    } else if (name.starts_with(".nv.info.")) {
      const std::string kernel_name = name.substr(std::string_view(".nv.info.").size());
      auto it = std::find_if(info.kernels.begin(), info.kernels.end(),
                             [&](const CubinKernel& k) { return k.name == kernel_name; });
      if (it != info.kernels.end()) apply_kernel_attributes(section_data(s, name.c_str()), name, *it);
    }
  }
  return info;
}

}  // namespace metrale::cuda
