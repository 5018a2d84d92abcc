// SPDX-License-Identifier: MIT OR Apache-2.0
// Levers: METRALE_* environment variables, each declared once (name, type, default, meaning) in
// one registry that documents itself (`metrale levers`, docs/levers.md). The runtime declares its
// own; a library (the layers) registers its levers with register_levers(); the registry declares
// those of each manifest it finds. A value is read once per process and cached; a value that does
// not parse is a Refusal naming the variable and value. Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace metrale {

enum class LeverType {
  presence,  // set to any value (0 and "" included) means on
  flag,      // "1" means on, "0" off; any other value is refused
  u32,
  string,
  choice,    // one of LeverSpec::choices
  path_list, // colon-separated paths
  glob_list, // comma-separated globs
  path,
  kernel_map,  // comma-separated module/name=module/name pairs
};

// "presence", "flag", "u32", "string", "choice", "path", "path_list", "glob_list", "kernel_map".
const char* lever_type_name(LeverType type) noexcept;
std::optional<LeverType> lever_type_from_name(std::string_view name);

struct LeverSpec {
  std::string_view name;
  LeverType type;
  std::string_view default_text;  // shown by `metrale levers`
  std::string_view meaning;       // one sentence
  std::vector<std::string_view> choices;  // for LeverType::choice
  bool path_like = false;  // ignored in elevated-privilege processes (secure_getenv)
  std::string_view declared_by = {};  // "runtime", "layers", "backend cpu", ...: who owns the name
  std::string_view declared_in = {};  // the manifest that declared it, when a manifest did
};

// Declares a library's levers. The registry keeps its own copy of every string. Declaring a lever
// again with the same spec (name, type, default, meaning, choices, path_like) is a no-op, so this
// is idempotent; a name already declared with another spec, a name outside METRALE_*, a missing
// declared_by or a choice lever without choices throw Error(internal).
void register_levers(std::span<const LeverSpec> specs);
// Why `spec` could not be registered: the existing declaration it contradicts, or nullopt.
std::optional<std::string> lever_conflict(const LeverSpec& spec);

// Every lever declared so far, in declaration order (the runtime's first). The views stay valid
// for the life of the process.
std::vector<LeverSpec> lever_specs();
const LeverSpec* find_lever(std::string_view name);

// The raw value of a declared lever: nullopt when unset (or ignored for privilege reasons).
// Reads the environment on first use of each lever and caches it.
std::optional<std::string> lever_raw(std::string_view name);
bool lever_is_set(std::string_view name);
// Typed reads; throw Refusal when the value does not parse for the lever's type.
bool lever_on(std::string_view name);  // presence / flag semantics per the spec
std::optional<uint32_t> lever_u32(std::string_view name);
std::optional<std::string> lever_choice(std::string_view name);
// The raw value, checked against the lever's type (throws Refusal when it does not parse).
std::optional<std::string> lever_checked(std::string_view name);
// Parses every set lever declared so far; throws Refusal on the first bad value (start-up check).
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
