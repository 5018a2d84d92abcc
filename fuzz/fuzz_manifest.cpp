// SPDX-License-Identifier: MIT OR Apache-2.0
// libFuzzer harness: plugin manifests (parse_manifest: the bounded JSON reader, then validation).
#include <metrale/manifest.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const metrale::ManifestResult result = metrale::parse_manifest("/fuzz/manifest.json", text);
  // Never throws; exactly one of a manifest or its problems (a skipped format has problems).
  if (result.manifest.has_value() == !result.problems.empty()) __builtin_trap();
  for (const auto& problem : result.problems) {
    if (problem.to_string().empty()) __builtin_trap();
  }
  if (result.manifest) (void)result.manifest->kernel_count();
  return 0;
}
