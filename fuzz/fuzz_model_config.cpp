// SPDX-License-Identifier: MIT OR Apache-2.0
// libFuzzer harness: config.json (the bounded JSON reader, then parse_model_config).
#include <metrale/json_file.hpp>
#include <metrale/log.hpp>
#include <metrale/status.hpp>

#include <io/config.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  metrale::logger()->set_level(spdlog::level::off);  // hidden_act "gelu" warns on every run
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto config = metrale::layers::parse_model_config(metrale::parse_json(text, "config.json"), "config.json");
    // What parse accepts, validate accepts, within the documented limits.
    config.validate();
    if (config.hidden_size > metrale::layers::kMaxHiddenSize) __builtin_trap();
    if (config.ffn_weight_bytes() > metrale::layers::kMaxFfnWeightBytes) __builtin_trap();
    (void)metrale::layers::gate_up_rows(config.intermediate_size);
    (void)config.to_json().dump();
  } catch (const metrale::Error&) {
    // Malformed input is an Error; anything else escaping is a finding.
  }
  return 0;
}
