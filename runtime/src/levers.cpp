// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/levers.hpp>
#include <metrale/names.hpp>
#include <metrale/status.hpp>

#include <sys/auxv.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>

extern char** environ;

namespace metrale {

namespace {

std::vector<LeverSpec> make_specs() {
  using T = LeverType;
  return {
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
      // Backend options.
      {"METRALE_CPU_TARGET", T::choice, "auto",
       "Force the CPU backend to a lower instruction-set tier.",
       {"auto", "avx512bf16", "avx512", "avx2", "baseline"}, false},
      {"METRALE_CPU_THREADS", T::u32, "(CPUs in the affinity mask)",
       "Worker threads of the CPU backend's pool, 1 to 1024.", {}, false},
      {"METRALE_CPU_PIN", T::flag, "0",
       "1 pins each worker thread of the CPU backend's pool to one CPU of the affinity mask "
       "(the calling thread is never pinned); 0 leaves them unpinned.", {}, false},
      {"METRALE_CUDA_DRIVER", T::path, "libcuda.so.1",
       "CUDA driver library the CUDA backend opens.", {}, true},
      {"METRALE_CUDA_DEVICE", T::u32, "0", "Index of the CUDA device to drive.", {}, false},
      // Kernel selection (design.md section 7).
      {"METRALE_W4A16_K64_MIN_K", T::u32, "6144 (8192 with METRALE_NO_W4A16_K64=1)",
       "Smallest K at which tile-GEMM sites take the deep-K k64 kernel.", {}, false},
      {"METRALE_NO_W4A16_K64", T::flag, "0",
       "Exactly 1 raises the k64 threshold default to 8192; 0 leaves it at 6144.", {}, false},
      {"METRALE_W4A16_VARIANT", T::choice, "v1",
       "v2 or v3 opts into the m128 v2/v3 kernels and refuses to start when they are missing.",
       {"v1", "v2", "v3"}, false},
      {"METRALE_NO_TGEMM_PIPELINE3", T::presence, "(unset)",
       "Set to any value, 0 included: the tile GEMM skips w4a16_gemm_t_p3.", {}, false},
      {"METRALE_NO_K64_PIPELINE3", T::presence, "(unset)",
       "Set to any value, 0 included: the k64 GEMM skips w4a16_gemm_t_k64_p3.", {}, false},
      {"METRALE_NO_K64_N64", T::presence, "(unset)",
       "Set to any value, 0 included: no lookup of the N64 deep-K twin.", {}, false},
      // Quantization tiers (docs/quantization.md).
      {"METRALE_ACTIVATION_QUANTIZATION", T::choice, "(what the checkpoint declares, else bf16)",
       "Activation tier of the FFN projections: bf16, or int8 / fp8 quantized per token; an explicit tier the "
       "backend lacks is a refusal.", {"bf16", "int8", "fp8"}, false},
      {"METRALE_WEIGHT_QUANTIZATION", T::choice, "int4",
       "Weight tier of synthetic weights: int4 (symmetric group-128 W4A16), int4-zp, int8 or fp8; a checkpoint's "
       "declared format rules instead.", {"int4", "int4-zp", "int8", "fp8"}, false},
      {"METRALE_EXPERT_QUANTIZATION", T::choice, "(the weight tier)",
       "Weight tier of synthetic MoE experts, when it differs from METRALE_WEIGHT_QUANTIZATION.",
       {"int4", "int4-zp", "int8", "fp8"}, false},
      {"METRALE_FP8_MOE_GROUPED_DECODE", T::choice, "(try it)",
       "1 requires the cross-row grouped FP8 MoE decode (refusing when the backend lacks it); 0 turns it off; "
       "unset tries it and falls back.", {"0", "1"}, false},
      // Kernel-developer workflows.
      {"METRALE_KERNEL_SUBST", T::kernel_map, "(none)",
       "Comma-separated module/name=module/name: look up the right-hand kernel wherever the left is "
       "asked for; it must exist and declare the same parameters, or the runtime refuses to start.", {}, false},
      {"METRALE_LOCK", T::path, "(none)",
       "A lock file from `metrale audit --lock`: refuse to start if any kernel resolution differs.", {}, true},
  };
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
  throw Refusal(std::string(spec.name) + "=\"" + value + "\" is not valid: expected " + std::string(expected));
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

const std::vector<LeverSpec>& lever_specs() {
  static const std::vector<LeverSpec> specs = make_specs();
  return specs;
}

const LeverSpec* find_lever(std::string_view name) {
  for (const auto& spec : lever_specs())
    if (spec.name == name) return &spec;
  return nullptr;
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

std::optional<std::string> lever_choice(std::string_view name) {
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
  std::vector<UnknownLever> unknown;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view text(*entry);
    if (!text.starts_with("METRALE_")) continue;
    std::string_view name = text.substr(0, text.find('='));
    if (find_lever(name)) continue;
    std::vector<std::string_view> names;
    for (const auto& spec : lever_specs()) names.push_back(spec.name);
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
