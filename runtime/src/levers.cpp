// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/levers.hpp>
#include <metrale/names.hpp>
#include <metrale/status.hpp>

#include <sys/auxv.h>
#include <unistd.h>  // environ

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>

namespace metrale {

namespace {

// The runtime's own levers: discovery, selection, logging and kernel-developer workflows. Backend
// levers come from manifests, kernel-selection levers from the layers.
std::vector<LeverSpec> runtime_specs() {
  using T = LeverType;
  std::vector<LeverSpec> specs{
      // Discovery and selection.
      {"METRALE_BACKEND", T::string, "(highest priority)",
       "Backend to use, by name; failing to load it is a refusal, never a silent fallback.", {}, false},
      {"METRALE_BACKENDS_DISABLE", T::glob_list, "(none)",
       "Comma-separated globs of backend names not to load.", {}, false},
      {"METRALE_MANIFESTS", T::path_list, "(none)",
       "Colon-separated manifest files; replaces discovery entirely.", {}, true},
      {"METRALE_ADD_MANIFESTS", T::path_list, "(none)",
       "Colon-separated manifest files searched before the plugin directories.", {}, true},
      {"METRALE_PLUGIN_PATH", T::path_list, "(none)",
       "Colon-separated directories searched for *.json manifests.", {}, true},
      {"METRALE_CACHE_DIR", T::path, "$XDG_CACHE_HOME/metrale",
       "Where backends keep compiled kernels.", {}, true},
      {"METRALE_KERNEL_SRC", T::path, "(installed kernel_src)",
       "Directory searched first for JIT kernel sources (edit a .cu, rerun, no rebuild).", {}, true},
      {"METRALE_LOG", T::choice, "warn", "Log level on stderr.",
       {"trace", "debug", "info", "warn", "error", "off"}, false},
      // Kernel-developer workflows.
      {"METRALE_KERNEL_SUBST", T::kernel_map, "(none)",
       "Comma-separated module/name=module/name: look up the right-hand kernel wherever the left is "
       "asked for; it must exist and declare the same parameters, or the runtime refuses to start.", {}, false},
      {"METRALE_LOCK", T::path, "(none)",
       "A lock file from `metrale audit --lock`: refuse to start if any kernel resolution differs.", {}, true},
  };
  for (auto& spec : specs) spec.declared_by = "runtime";
  return specs;
}

// Every declared lever. Specs and the strings they view are never removed, so pointers and views
// handed out stay valid for the life of the process.
struct Declared {
  std::mutex mutex;
  std::deque<std::string> strings;
  std::deque<LeverSpec> specs;
};

std::string_view keep(Declared& d, std::string_view text) { return d.strings.emplace_back(text); }

const LeverSpec* find_locked(const Declared& d, std::string_view name) {
  for (const auto& spec : d.specs)
    if (spec.name == name) return &spec;
  return nullptr;
}

std::string declarer(const LeverSpec& spec) {
  std::string out(spec.declared_by);
  if (!spec.declared_in.empty()) out += " in manifest " + std::string(spec.declared_in);
  return out;
}

// The first field in which two declarations of one name differ, or "" when they agree.
std::string difference(const LeverSpec& have, const LeverSpec& want) {
  if (have.type != want.type)
    return std::string("as a ") + lever_type_name(have.type) + " lever, not a " + lever_type_name(want.type) + " one";
  if (have.default_text != want.default_text) return "with default \"" + std::string(have.default_text) + "\"";
  if (have.meaning != want.meaning) return "with another meaning: \"" + std::string(have.meaning) + "\"";
  if (have.choices != want.choices) return "with other choices";
  if (have.path_like != want.path_like) return have.path_like ? "as a path lever" : "as a non-path lever";
  return {};
}

void check_declarable(const LeverSpec& spec) {
  const std::string name(spec.name);
  if (!spec.name.starts_with("METRALE_") || spec.name.size() == 8)
    throw Error(Status::internal, "lever \"" + name + "\": a lever name is METRALE_ followed by more");
  if (spec.declared_by.empty()) throw Error(Status::internal, "lever " + name + " has no declared_by");
  if (spec.type == LeverType::choice && spec.choices.empty())
    throw Error(Status::internal, "choice lever " + name + " declares no choices");
}

void add_locked(Declared& d, const LeverSpec& spec) {
  LeverSpec copy = spec;
  copy.name = keep(d, spec.name);
  copy.default_text = keep(d, spec.default_text);
  copy.meaning = keep(d, spec.meaning);
  copy.declared_by = keep(d, spec.declared_by);
  copy.declared_in = keep(d, spec.declared_in);
  for (auto& choice : copy.choices) choice = keep(d, choice);
  d.specs.push_back(std::move(copy));
}

Declared& declared() {
  static Declared* instance = [] {
    auto* d = new Declared;  // never destroyed: views into it may be used until exit
    for (const auto& spec : runtime_specs()) add_locked(*d, spec);
    return d;
  }();
  return *instance;
}

struct Cache {
  std::mutex mutex;
  std::map<std::string, std::optional<std::string>, std::less<>> values;
  // METRALE_KERNEL_SUBST parsed once: every kernel lookup consults it.
  std::optional<std::vector<std::pair<std::string, std::string>>> substitutions;
};

Cache& cache() {
  static Cache instance;
  return instance;
}

const char* read_env(const LeverSpec& spec) {
  std::string name(spec.name);
  // Path levers could redirect what an elevated process loads: ignore them there.
  return spec.path_like ? secure_getenv(name.c_str()) : std::getenv(name.c_str());
}

const LeverSpec& require_spec(std::string_view name) {
  const LeverSpec* spec = find_lever(name);
  if (spec == nullptr) throw Error(Status::internal, "lever " + std::string(name) + " is not declared");
  return *spec;
}

[[noreturn]] void refuse(const LeverSpec& spec, const std::string& value, std::string_view expected) {
  std::string message = std::string(spec.name) + "=\"" + value + "\" is not valid: expected " + std::string(expected);
  if (spec.declared_by != "runtime") message += " (lever declared by " + declarer(spec) + ")";
  throw Refusal(message);
}

std::optional<uint32_t> parse_u32(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  uint32_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

bool is_kernel_name(std::string_view text) {
  auto slash = text.find('/');
  return slash != std::string_view::npos && slash > 0 && slash + 1 < text.size() &&
         text.find('/', slash + 1) == std::string_view::npos;
}

std::vector<std::pair<std::string, std::string>> parse_kernel_map(const LeverSpec& spec, const std::string& value) {
  std::vector<std::pair<std::string, std::string>> pairs;
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    std::string_view item(value.data() + start, end - start);
    auto equals = item.find('=');
    if (equals == std::string_view::npos || !is_kernel_name(item.substr(0, equals)) ||
        !is_kernel_name(item.substr(equals + 1)))
      refuse(spec, value, "comma-separated module/name=module/name pairs; \"" + std::string(item) + "\" is not one");
    pairs.emplace_back(item.substr(0, equals), item.substr(equals + 1));
    start = end + 1;
  }
  return pairs;
}

void check_value(const LeverSpec& spec, const std::string& value) {
  switch (spec.type) {
    case LeverType::presence:
    case LeverType::string:
    case LeverType::path_list:
    case LeverType::glob_list:
      return;
    case LeverType::path:
      if (value.empty()) refuse(spec, value, "a non-empty path");
      return;
    case LeverType::flag:
      if (value != "0" && value != "1") refuse(spec, value, "0 or 1");
      return;
    case LeverType::u32:
      if (!parse_u32(value)) refuse(spec, value, "an unsigned 32-bit integer");
      return;
    case LeverType::kernel_map:
      parse_kernel_map(spec, value);
      return;
    case LeverType::choice: {
      if (std::find(spec.choices.begin(), spec.choices.end(), value) != spec.choices.end()) return;
      std::string list;
      for (auto choice : spec.choices) list += (list.empty() ? "" : ", ") + std::string(choice);
      refuse(spec, value, "one of " + list);
    }
  }
}

}  // namespace

const char* lever_type_name(LeverType type) noexcept {
  switch (type) {
    case LeverType::presence: return "presence";
    case LeverType::flag: return "flag";
    case LeverType::u32: return "u32";
    case LeverType::string: return "string";
    case LeverType::choice: return "choice";
    case LeverType::path_list: return "path_list";
    case LeverType::glob_list: return "glob_list";
    case LeverType::path: return "path";
    case LeverType::kernel_map: return "kernel_map";
  }
  return "?";
}

std::optional<LeverType> lever_type_from_name(std::string_view name) {
  for (auto type : {LeverType::presence, LeverType::flag, LeverType::u32, LeverType::string, LeverType::choice,
                    LeverType::path_list, LeverType::glob_list, LeverType::path, LeverType::kernel_map})
    if (name == lever_type_name(type)) return type;
  return std::nullopt;
}

std::optional<std::string> lever_conflict(const LeverSpec& spec) {
  auto& d = declared();
  std::lock_guard lock(d.mutex);
  const LeverSpec* have = find_locked(d, spec.name);
  if (have == nullptr) return std::nullopt;
  std::string differs = difference(*have, spec);
  if (differs.empty()) return std::nullopt;
  return std::string(spec.name) + " is already declared by " + declarer(*have) + " " + differs;
}

void register_levers(std::span<const LeverSpec> specs) {
  for (const auto& spec : specs) check_declarable(spec);
  auto& d = declared();
  std::lock_guard lock(d.mutex);
  // All or nothing: a conflict (with the registry or within `specs`) leaves the registry as it was.
  for (size_t i = 0; i < specs.size(); ++i) {
    const LeverSpec* have = find_locked(d, specs[i].name);
    for (size_t j = 0; j < i && have == nullptr; ++j)
      if (specs[j].name == specs[i].name) have = &specs[j];
    if (have == nullptr) continue;
    if (std::string differs = difference(*have, specs[i]); !differs.empty())
      throw Error(Status::internal, "lever " + std::string(specs[i].name) + " declared by " + declarer(specs[i]) +
                                        " is already declared by " + declarer(*have) + " " + differs);
  }
  for (const auto& spec : specs)
    if (find_locked(d, spec.name) == nullptr) add_locked(d, spec);
}

std::vector<LeverSpec> lever_specs() {
  auto& d = declared();
  std::lock_guard lock(d.mutex);
  return {d.specs.begin(), d.specs.end()};
}

const LeverSpec* find_lever(std::string_view name) {
  auto& d = declared();
  std::lock_guard lock(d.mutex);
  return find_locked(d, name);
}

std::optional<std::string> lever_raw(std::string_view name) {
  const LeverSpec& spec = require_spec(name);
  auto& c = cache();
  std::lock_guard lock(c.mutex);
  if (auto it = c.values.find(name); it != c.values.end()) return it->second;
  const char* value = read_env(spec);
  std::optional<std::string> result = value ? std::optional<std::string>(value) : std::nullopt;
  c.values.emplace(std::string(name), result);
  return result;
}

bool lever_is_set(std::string_view name) { return lever_raw(name).has_value(); }

bool lever_on(std::string_view name) {
  const LeverSpec& spec = require_spec(name);
  auto value = lever_raw(name);
  if (!value) return false;
  check_value(spec, *value);
  return spec.type == LeverType::flag ? *value == "1" : true;
}

std::optional<uint32_t> lever_u32(std::string_view name) {
  const LeverSpec& spec = require_spec(name);
  auto value = lever_raw(name);
  if (!value) return std::nullopt;
  check_value(spec, *value);
  return parse_u32(*value);
}

std::optional<std::string> lever_choice(std::string_view name) { return lever_checked(name); }

std::optional<std::string> lever_checked(std::string_view name) {
  const LeverSpec& spec = require_spec(name);
  auto value = lever_raw(name);
  if (value) check_value(spec, *value);
  return value;
}

void validate_levers() {
  for (const auto& spec : lever_specs())
    if (auto value = lever_raw(spec.name)) check_value(spec, *value);
}

std::string lever_note(std::string_view name) {
  auto value = lever_raw(name);
  return value ? std::string(name) + "=" + *value : std::string();
}

std::vector<UnknownLever> unknown_levers() {
  const std::vector<LeverSpec> specs = lever_specs();
  std::vector<UnknownLever> unknown;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view text(*entry);
    if (!text.starts_with("METRALE_")) continue;
    std::string_view name = text.substr(0, text.find('='));
    if (find_lever(name)) continue;
    std::vector<std::string_view> names;
    for (const auto& spec : specs) names.push_back(spec.name);
    unknown.push_back({std::string(name), nearest_name(name, names).value_or("")});
  }
  return unknown;
}

const std::vector<std::pair<std::string, std::string>>& kernel_substitutions() {
  auto& c = cache();
  {
    std::lock_guard lock(c.mutex);
    if (c.substitutions) return *c.substitutions;
  }
  auto value = lever_raw("METRALE_KERNEL_SUBST");
  auto parsed = value ? parse_kernel_map(require_spec("METRALE_KERNEL_SUBST"), *value)
                      : std::vector<std::pair<std::string, std::string>>{};
  std::lock_guard lock(c.mutex);
  if (!c.substitutions) c.substitutions = std::move(parsed);
  return *c.substitutions;
}

bool process_is_elevated() { return getauxval(AT_SECURE) != 0; }

void reset_lever_cache_for_tests() {
  auto& c = cache();
  std::lock_guard lock(c.mutex);
  c.values.clear();
  c.substitutions.reset();
}

}  // namespace metrale
