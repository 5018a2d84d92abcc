// SPDX-License-Identifier: MIT OR Apache-2.0
// libFuzzer harness: lock files (parse_lock) and audits given to `metrale audit --diff`.
#include <metrale/json_file.hpp>
#include <metrale/lock.hpp>
#include <metrale/status.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json lock = metrale::parse_lock(text, "lock.json");
    // A lock read back compares equal to itself.
    if (!metrale::lock_differences(lock, lock).empty()) __builtin_trap();
  } catch (const metrale::Error&) {
  }
  try {
    const nlohmann::json audit = metrale::parse_json(text, "audit.json");
    (void)metrale::diff_audits(audit, audit);
  } catch (const metrale::Error&) {
  }
  return 0;
}
