// SPDX-License-Identifier: MIT OR Apache-2.0
// Levers: METRALE_* environment variables, each declared once (name, type, default, meaning) in
// one registry that documents itself (`metrale levers`, docs/levers.md). A value is read once per
// process and cached; a value that does not parse is a Refusal naming the variable and value.
// Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace metrale {

enum class LeverType {
  presence,  // set to any value (0 and "" included) means on
  flag,      // exactly "1" means on; any other value means off (the seed's METRALE_NO_W4A16_K64)
  u32,
  string,
  choice,    // one of LeverSpec::choices
  path_list, // colon-separated paths
  glob_list, // comma-separated globs
  path,
  kernel_map,  // comma-separated module/name=module/name pairs
};

struct LeverSpec {
  std::string_view name;
  LeverType type;
  std::string_view default_text;  // shown by `metrale levers`
  std::string_view meaning;       // one sentence
  std::vector<std::string_view> choices;  // for LeverType::choice
  bool path_like = false;  // ignored in elevated-privilege processes (secure_getenv)
};

// Every lever the project knows, in documentation order.
const std::vector<LeverSpec>& lever_specs();
const LeverSpec* find_lever(std::string_view name);

// The raw value of a declared lever: nullopt when unset (or ignored for privilege reasons).
// Reads the environment on first use of each lever and caches it.
std::optional<std::string> lever_raw(std::string_view name);
bool lever_is_set(std::string_view name);
// Typed reads; throw Refusal when the value does not parse for the lever's type.
bool lever_on(std::string_view name);  // presence / flag semantics per the spec
std::optional<uint32_t> lever_u32(std::string_view name);
std::optional<std::string> lever_choice(std::string_view name);
// Parses every set lever now; throws Refusal on the first bad value (start-up check).
void validate_levers();
// "NAME=value" for audit rows; "" when unset.
std::string lever_note(std::string_view name);

// METRALE_* variables in the environment that no lever declares, each with the nearest known name.
struct UnknownLever {
  std::string name;
  std::string nearest;
};
std::vector<UnknownLever> unknown_levers();

// METRALE_KERNEL_SUBST parsed once: requested "module/name" -> substitute "module/name".
// Throws Refusal on a malformed value. The reference stays valid until the next
// reset_lever_cache_for_tests().
const std::vector<std::pair<std::string, std::string>>& kernel_substitutions();

// Whether this process runs with elevated privileges (setuid/setgid/capabilities).
bool process_is_elevated();

// Tests only: forget cached values so the next read sees the current environment.
void reset_lever_cache_for_tests();

}  // namespace metrale
