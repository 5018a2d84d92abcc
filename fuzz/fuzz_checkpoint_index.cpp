// SPDX-License-Identifier: MIT OR Apache-2.0
// libFuzzer harness: *.safetensors.index.json (parse_checkpoint_index, then confine_shard in an
// empty temporary directory).
#include <metrale/status.hpp>

#include <io/tensor_source.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace {

std::filesystem::path index_file;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  std::string dir = (std::filesystem::temp_directory_path() / "metrale-fuzz-index-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) std::abort();
  index_file = std::filesystem::path(dir) / "model.safetensors.index.json";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    for (const std::string& shard : metrale::layers::parse_checkpoint_index(text, index_file)) {
      // What the parser accepts is a plain relative name.
      const std::filesystem::path path(shard);
      if (shard.empty() || path.is_absolute()) __builtin_trap();
      for (const auto& part : path) {
        if (part == "..") __builtin_trap();
      }
      const std::filesystem::path confined = metrale::layers::confine_shard(index_file, shard);
      if (confined != index_file.parent_path() / shard) __builtin_trap();
    }
  } catch (const metrale::Error&) {
  }
  return 0;
}
