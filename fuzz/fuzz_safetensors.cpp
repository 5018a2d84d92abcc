// SPDX-License-Identifier: MIT OR Apache-2.0
// libFuzzer harness: safetensors files. Each input is a whole file, written to a memory file and
// opened by path through SafetensorsReader; every tensor it accepts is then read back.
#include <metrale/status.hpp>

#include <io/safetensors.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

int memory_file = -1;

void read_every_tensor(metrale::layers::SafetensorsReader& reader) {
  using metrale::layers::Dtype;
  for (const std::string& name : reader.names()) {
    const auto& info = reader.info(name);
    const auto raw = reader.read_raw(name, {info.dtype}, info.shape);
    if (raw.size() != info.end - info.begin) __builtin_trap();
    switch (info.dtype) {
      case Dtype::f32:
      case Dtype::f16:
      case Dtype::bf16: (void)reader.read_f32(name, info.shape); break;
      case Dtype::u32:
      case Dtype::i32: (void)reader.read_u32(name, {info.dtype}, info.shape); break;
      case Dtype::u16: (void)reader.read_u16(name, {info.dtype}, info.shape); break;
      default: break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  memory_file = ::memfd_create("metrale-fuzz-safetensors", MFD_CLOEXEC);
  if (memory_file < 0) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (::ftruncate(memory_file, 0) != 0 || ::pwrite(memory_file, data, size, 0) != static_cast<ssize_t>(size)) {
    std::abort();
  }
  try {
    metrale::layers::SafetensorsReader reader("/proc/self/fd/" + std::to_string(memory_file));
    read_every_tensor(reader);
  } catch (const metrale::Error&) {
  }
  return 0;
}
