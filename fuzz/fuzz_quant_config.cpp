// SPDX-License-Identifier: MIT OR Apache-2.0
// libFuzzer harness: a checkpoint's quantization_config (the bounded JSON reader, then
// parse_quant_config). Malformed input is an Error, an unsupported declaration a Refusal (an
// Error too); what parses must describe itself and keep the declaration rules.
#include <metrale/json_file.hpp>
#include <metrale/status.hpp>

#include <io/quant_config.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto doc = metrale::parse_json(text, "config.json");
    const auto quant = metrale::layers::parse_quant_config(doc, "config.json");
    // What parses is one of the supported declarations.
    if (quant.bits != 0 && quant.bits != 4 && quant.bits != 8) __builtin_trap();
    if (quant.group_size != -1 && quant.group_size <= 0) __builtin_trap();
    (void)quant.summary();
  } catch (const metrale::Error&) {
    // Malformed or unsupported input is an Error; anything else escaping is a finding.
  }
  return 0;
}
