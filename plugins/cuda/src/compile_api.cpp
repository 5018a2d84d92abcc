// SPDX-License-Identifier: MIT OR Apache-2.0
// The compile extension (cuda_compile.h). Shares the compiler, the cache and the kernel checks with
// the backend, so what it reports and caches is exactly what a device of that target would load.
// Kernel source directories come from the caller; the plugin has none of its own.
#include "compile_api.hpp"

#include "catalog.hpp"
#include "compile_cache.hpp"
#include "errors.hpp"
#include "host_log.hpp"
#include "nvrtc_compiler.hpp"
#include "targets.hpp"

#include <metrale/cuda_compile.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace metrale::cuda {

namespace {

// Owns every string and array a result points into.
struct ResultStorage {
  metrale_cuda_compile_result result{};
  std::deque<std::string> strings;  // deque: c_str() pointers stay valid as it grows
  std::vector<metrale_cuda_module_report> modules;
  std::deque<std::vector<metrale_cuda_kernel_report>> kernels;

  const char* keep(std::string text) {
    strings.push_back(std::move(text));
    return strings.back().c_str();
  }
};

std::mutex g_results_mutex;
std::map<const metrale_cuda_compile_result*, std::unique_ptr<ResultStorage>>& results() {
  static auto* map = new std::map<const metrale_cuda_compile_result*, std::unique_ptr<ResultStorage>>;
  return *map;
}

int32_t or_minus_one(const std::optional<uint32_t>& value) {
  return value ? static_cast<int32_t>(*value) : -1;
}

void write_error(char* error, size_t error_size, const std::string& message) noexcept {
  if (error == nullptr || error_size == 0) return;
  const size_t n = std::min(message.size(), error_size - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

// The request's target, checked against what this NVRTC can compile for.
Target checked_target(const metrale_cuda_compile_request& request) {
  if (request.struct_size < sizeof(metrale_cuda_compile_request)) {
    throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "metrale_cuda_compile: short request struct");
  }
  if (request.target == nullptr || request.manifest_json == nullptr) {
    throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "metrale_cuda_compile: target and manifest_json are required");
  }
  const auto target = parse_target(request.target);
  if (!target) {
    throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, std::string("\"") + request.target +
                                                           "\" is not a CUDA target (sm_XY, sm_XYa or sm_XYf, e.g. sm_80)");
  }
  const auto archs = ModuleCompiler::supported_archs();
  if (std::find(archs.begin(), archs.end(), target->number) == archs.end()) {
    std::string known;
    for (int a : archs) known += (known.empty() ? "sm_" : ", sm_") + std::to_string(a);
    throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "NVRTC " + ModuleCompiler::nvrtc_version() +
                                                           " cannot compile for " + request.target + " (it knows " + known + ")");
  }
  return *target;
}

// The modules the request names (every module when it names none).
std::vector<const CatalogModule*> selected_modules(const Catalog& catalog, const metrale_cuda_compile_request& request) {
  std::vector<const CatalogModule*> selected;
  if (request.modules == nullptr || request.module_count == 0) {
    for (const auto& m : catalog.modules()) selected.push_back(&m);
    return selected;
  }
  for (uint32_t i = 0; i < request.module_count; ++i) {
    const char* name = request.modules[i];
    const CatalogModule* module = name ? catalog.find(name) : nullptr;
    if (module == nullptr) {
      std::string have;
      for (const auto& m : catalog.modules()) have += (have.empty() ? "" : ", ") + m.name;
      throw PluginError(METRALE_STATUS_NOT_FOUND, std::string("no module '") + (name ? name : "(null)") +
                                                      "' in the manifest (modules: " + have + ")");
    }
    selected.push_back(module);
  }
  return selected;
}

ModuleCompiler::Settings compiler_settings(const metrale_cuda_compile_request& request, const HostLog& log) {
  ModuleCompiler::Settings settings;
  for (uint32_t i = 0; i < request.kernel_source_dir_count && request.kernel_source_dirs != nullptr; ++i) {
    if (request.kernel_source_dirs[i] != nullptr) settings.source_dirs.emplace_back(request.kernel_source_dirs[i]);
  }
  if (request.cache_dir != nullptr && *request.cache_dir != '\0') settings.cache_dir = request.cache_dir;
  settings.log = log;
  return settings;
}

// Why the module is not compiled for `target` (every kernel needs a newer one), or "".
std::string gate_reason(const CatalogModule& module, const Target& target) {
  if (module.kernels.empty()) return {};
  for (const auto& k : module.kernels) {
    if (!k.min_target || target_satisfies(target, *k.min_target)) return {};
  }
  std::string why = "every kernel requires a newer target than " + target_name(target) + " (";
  for (size_t i = 0; i < module.kernels.size(); ++i) {
    why += (i ? ", " : "") + module.kernels[i].name + ": " + target_name(*module.kernels[i].min_target);
  }
  return why + ")";
}

// One kernel's resources in the image, and why it cannot be used from it ("" when it can).
metrale_cuda_kernel_report kernel_report(const CatalogKernel& k, const CompiledModule& compiled, const Target& target,
                                         ResultStorage& storage, std::string& problem) {
  metrale_cuda_kernel_report kr{};
  kr.name = storage.keep(k.name);
  kr.registers = kr.spill_store_bytes = kr.spill_load_bytes = kr.stack_bytes = kr.shared_bytes = -1;
  // A gated kernel is noted but expected: not a problem of the module.
  const bool gated = k.min_target && !target_satisfies(target, *k.min_target);
  const std::string note = gated ? "gated: requires " + target_name(*k.min_target) : check_kernel(k, compiled);
  kr.problem = storage.keep(note);
  problem = gated ? std::string() : note;
  for (const auto& s : compiled.stats) {
    if (s.name != k.name) continue;
    kr.registers = or_minus_one(s.registers);
    kr.spill_store_bytes = or_minus_one(s.spill_store_bytes);
    kr.spill_load_bytes = or_minus_one(s.spill_load_bytes);
    kr.stack_bytes = or_minus_one(s.stack_bytes);
    kr.shared_bytes = or_minus_one(s.shared_bytes);
  }
  return kr;
}

// Compiles (or loads from the cache) one module and fills its report and kernel reports.
void compile_module(const CatalogModule& module, const ModuleCompiler& compiler, const Target& target,
                    ResultStorage& storage, metrale_cuda_module_report& report,
                    std::vector<metrale_cuda_kernel_report>& kernel_reports) {
  try {
    const CompiledModule compiled = compiler.compile(module, target);
    report.outcome = compiled.cache_hit ? METRALE_CUDA_MODULE_CACHED : METRALE_CUDA_MODULE_COMPILED;
    report.status = METRALE_STATUS_OK;
    report.source_path = storage.keep(compiled.source_path.string());
    report.seconds = compiled.seconds;
    report.image_bytes = compiled.image.size();
    report.is_cubin = compiled.is_cubin ? 1 : 0;
    std::string problems;
    for (const auto& k : module.kernels) {
      std::string problem;
      kernel_reports.push_back(kernel_report(k, compiled, target, storage, problem));
      if (problem.empty()) continue;
      report.status = METRALE_STATUS_INCOMPATIBLE;
      problems += (problems.empty() ? "" : "; ") + problem;
    }
    report.message = storage.keep(problems);
  } catch (const PluginError& e) {
    report.outcome = METRALE_CUDA_MODULE_FAILED;
    report.status = e.status();
    report.message = storage.keep(e.what());
  }
}

std::unique_ptr<ResultStorage> run(const metrale_cuda_compile_request& request) {
  const Target target = checked_target(request);
  const Catalog catalog = Catalog::parse(request.manifest_json, request.manifest_path ? request.manifest_path : "manifest");
  const std::vector<const CatalogModule*> selected = selected_modules(catalog, request);
  const HostLog log(request.log, request.user);
  ModuleCompiler::Settings settings = compiler_settings(request, log);
  const std::optional<std::filesystem::path> cache_dir = settings.cache_dir;
  const ModuleCompiler compiler(std::move(settings));

  auto storage = std::make_unique<ResultStorage>();
  storage->modules.reserve(selected.size());  // reports handed to progress() must not move
  auto& result = storage->result;
  result.struct_size = sizeof(metrale_cuda_compile_result);
  result.target = storage->keep(target_name(target));
  result.nvrtc_version = storage->keep(ModuleCompiler::nvrtc_version());
  result.cuda_include_dir = storage->keep(ModuleCompiler::cuda_include_dir().string());
  result.cache_dir = storage->keep(cache_dir ? CompileCache(*cache_dir, log).directory().string() : "");

  for (const CatalogModule* module : selected) {
    metrale_cuda_module_report report{};
    report.module = storage->keep(module->name);
    report.source_path = "";
    report.message = "";
    if (request.progress) request.progress(request.user, &report, 0);
    auto& kernel_reports = storage->kernels.emplace_back();
    if (std::string why = gate_reason(*module, target); !why.empty()) {
      report.outcome = METRALE_CUDA_MODULE_GATED;
      report.status = METRALE_STATUS_OK;
      report.message = storage->keep(why);
    } else {
      compile_module(*module, compiler, target, *storage, report, kernel_reports);
    }
    report.kernels = kernel_reports.data();
    report.kernel_count = static_cast<uint32_t>(kernel_reports.size());
    storage->modules.push_back(report);
    if (request.progress) request.progress(request.user, &storage->modules.back(), 1);
  }
  result.modules = storage->modules.data();
  result.module_count = static_cast<uint32_t>(storage->modules.size());
  return storage;
}

metrale_status compile(const metrale_cuda_compile_request* request, metrale_cuda_compile_result** result,
                       char* error, size_t error_size) {
  if (result == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  *result = nullptr;
  try {
    if (request == nullptr) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "metrale_cuda_compile: null request");
    auto storage = run(*request);
    std::lock_guard lock(g_results_mutex);
    metrale_cuda_compile_result* out = &storage->result;
    results().emplace(out, std::move(storage));
    *result = out;
    return METRALE_STATUS_OK;
  } catch (const PluginError& e) {
    write_error(error, error_size, e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    write_error(error, error_size, "out of host memory");
    return METRALE_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    write_error(error, error_size, std::string("internal error: ") + e.what());
    return METRALE_STATUS_INTERNAL;
  } catch (...) {
    write_error(error, error_size, "internal error: unknown exception");
    return METRALE_STATUS_INTERNAL;
  }
}

void compile_free(metrale_cuda_compile_result* result) {
  if (result == nullptr) return;
  try {
    std::unique_ptr<ResultStorage> storage;
    {
      std::lock_guard lock(g_results_mutex);
      auto it = results().find(result);
      if (it == results().end()) return;
      storage = std::move(it->second);
      results().erase(it);
    }
  } catch (...) {
    // Nothing may escape; a failure here leaks at worst.
  }
}

static_assert(std::is_same_v<decltype(&compile), metrale_cuda_compile_fn>);
static_assert(std::is_same_v<decltype(&compile_free), metrale_cuda_compile_free_fn>);

}  // namespace

void* compile_extension(const char* name) noexcept {
  if (name == nullptr) return nullptr;
  if (std::strcmp(name, METRALE_CUDA_COMPILE_NAME) == 0) return reinterpret_cast<void*>(&compile);
  if (std::strcmp(name, METRALE_CUDA_COMPILE_FREE_NAME) == 0) return reinterpret_cast<void*>(&compile_free);
  return nullptr;
}

}  // namespace metrale::cuda
