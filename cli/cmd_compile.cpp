// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale compile --target sm_XX [--module M]...`: compile the CUDA backend's kernel modules with
// NVRTC for a target, without a GPU or a driver, through the compile cache; print per module the
// time, image size and cache hit, and per kernel registers, spills, stack and shared memory.
//
// The metrale binary does not link NVRTC: it finds the cuda backend's manifest by the registry's
// discovery, loads the library it names (Boost.DLL) and calls the plugin's extra entry point
// metrale_cuda_compile (plugins/cuda/include/metrale/cuda_compile.h). Progress goes to stderr,
// one line as each module starts and ends; the table (or --json) to stdout.
#include "commands.hpp"

#include <metrale/cuda_compile.h>
#include <metrale/log.hpp>
#include <metrale/manifest.hpp>
#include <metrale/paths.hpp>
#include <metrale/text_table.hpp>

#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <system_error>

namespace metrale::cli {

namespace {

struct CompileOptions {
  std::string target;
  std::vector<std::string> modules;
  bool no_cache = false;
};

// The first valid manifest of the cuda backend, in discovery order (a later one is shadowed).
Manifest find_cuda_manifest() {
  std::string looked;
  for (const auto& [file, origin] : discover_manifest_files(DiscoveryOptions{})) {
    looked += "\n  " + file.string() + " (" + manifest_origin_name(origin) + ")";
    ManifestResult result = load_manifest(file);
    if (!result.manifest || result.manifest->backend != "cuda") continue;
    return std::move(*result.manifest);
  }
  throw Error(Status::not_found, "no manifest of the cuda backend found; looked at:" +
                                     (looked.empty() ? std::string(" nothing (no manifests discovered)") : looked));
}

const char* outcome_name(metrale_cuda_module_outcome outcome) {
  switch (outcome) {
    case METRALE_CUDA_MODULE_COMPILED: return "compiled";
    case METRALE_CUDA_MODULE_CACHED: return "cache hit";
    case METRALE_CUDA_MODULE_GATED: return "gated";
    case METRALE_CUDA_MODULE_FAILED: return "FAILED";
  }
  return "?";
}

std::string seconds_text(double seconds) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), seconds < 0.1 ? "%.3f s" : "%.1f s", seconds);
  return buffer;
}

std::string bytes_text(uint64_t bytes) {
  if (bytes >= 10 * 1024) return std::to_string((bytes + 512) / 1024) + " KiB";
  return std::to_string(bytes) + " B";
}

std::string number_or_dash(int32_t value) { return value < 0 ? "-" : std::to_string(value); }

// Progress lines on stderr, so stdout stays the table or the JSON document.
struct Progress {
  uint32_t total = 0;
  uint32_t started = 0;
  std::string target;
  static void callback(void* user, const metrale_cuda_module_report* report, int32_t finished) {
    auto* self = static_cast<Progress*>(user);
    if (!finished) {
      ++self->started;
      std::cerr << "[" << self->started << "/" << self->total << "] " << report->module << ": compiling for "
                << self->target << " ..." << std::endl;
      return;
    }
    std::cerr << "[" << self->started << "/" << self->total << "] " << report->module << ": "
              << outcome_name(report->outcome);
    if (report->outcome == METRALE_CUDA_MODULE_COMPILED || report->outcome == METRALE_CUDA_MODULE_CACHED) {
      std::cerr << " in " << seconds_text(report->seconds) << ", " << bytes_text(report->image_bytes);
    }
    std::cerr << std::endl;
  }
};

nlohmann::json module_json(const metrale_cuda_module_report& m) {
  auto kernels = nlohmann::json::array();
  for (uint32_t j = 0; j < m.kernel_count; ++j) {
    const auto& k = m.kernels[j];
    const auto value = [](int32_t v) { return v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v); };
    kernels.push_back({{"name", k.name},
                       {"registers", value(k.registers)},
                       {"spill_store_bytes", value(k.spill_store_bytes)},
                       {"spill_load_bytes", value(k.spill_load_bytes)},
                       {"stack_bytes", value(k.stack_bytes)},
                       {"shared_bytes", value(k.shared_bytes)},
                       {"problem", k.problem}});
  }
  return {{"module", m.module},
          {"source", m.source_path},
          {"outcome", outcome_name(m.outcome)},
          {"cache_hit", m.outcome == METRALE_CUDA_MODULE_CACHED},
          {"status", std::string(status_name(status_from_abi(m.status)))},
          {"seconds", m.seconds},
          {"image_bytes", m.image_bytes},
          {"image", m.is_cubin ? "cubin" : "ptx"},
          {"message", m.message},
          {"kernels", kernels}};
}

void run_compile(CliContext& ctx, const CompileOptions& options) {
  const Manifest manifest = find_cuda_manifest();
  boost::dll::shared_library library;
  boost::dll::fs::error_code load_error;
  library.load(manifest.library, boost::dll::load_mode::rtld_local | boost::dll::load_mode::rtld_now, load_error);
  if (load_error) {
    throw Error(Status::unavailable, "cannot load the CUDA plugin " + manifest.library.string() + " (from " +
                                         manifest.path.string() + "): " + load_error.message());
  }
  if (!library.has(METRALE_CUDA_COMPILE_SYMBOL) || !library.has(METRALE_CUDA_COMPILE_FREE_SYMBOL)) {
    throw Error(Status::unimplemented, "the CUDA plugin " + manifest.library.string() + " has no " +
                                           METRALE_CUDA_COMPILE_SYMBOL + " entry point");
  }
  auto& compile = library.get<std::remove_pointer_t<metrale_cuda_compile_fn>>(METRALE_CUDA_COMPILE_SYMBOL);
  auto& compile_free = library.get<std::remove_pointer_t<metrale_cuda_compile_free_fn>>(METRALE_CUDA_COMPILE_FREE_SYMBOL);

  std::vector<std::string> dir_storage;
  for (const auto& dir : kernel_source_dirs()) dir_storage.push_back(dir.string());
  std::vector<const char*> dirs;
  for (const auto& dir : dir_storage) dirs.push_back(dir.c_str());
  std::vector<const char*> modules;
  for (const auto& m : options.modules) modules.push_back(m.c_str());
  const std::string cache = options.no_cache ? std::string() : cache_dir().value_or(std::filesystem::path()).string();
  const std::string manifest_path = manifest.path.string();

  Progress progress;
  progress.target = options.target;
  progress.total = static_cast<uint32_t>(options.modules.empty() ? manifest.modules.size() : options.modules.size());

  metrale_cuda_compile_request request{};
  request.struct_size = sizeof(request);
  request.target = options.target.c_str();
  request.manifest_json = manifest.text.c_str();
  request.manifest_path = manifest_path.c_str();
  request.kernel_source_dirs = dirs.data();
  request.kernel_source_dir_count = static_cast<uint32_t>(dirs.size());
  request.cache_dir = cache.empty() ? nullptr : cache.c_str();
  request.modules = modules.empty() ? nullptr : modules.data();
  request.module_count = static_cast<uint32_t>(modules.size());
  request.user = &progress;
  request.log = [](void*, metrale_log_level level, const char* message) {
    plugin_log_callback(const_cast<char*>("cuda"), level, message);
  };
  request.progress = &Progress::callback;

  char error[4096] = {};
  metrale_cuda_compile_result* raw = nullptr;
  const metrale_status status = compile(&request, &raw, error, sizeof(error));
  if (status != METRALE_STATUS_OK) {
    // A target or module the plugin cannot take is the user's request, not a failure inside.
    if (status == METRALE_STATUS_INVALID_ARGUMENT || status == METRALE_STATUS_NOT_FOUND) {
      logger()->error("{}", error);
      ctx.exit_code = kExitUsage;
      return;
    }
    throw Error(status_from_abi(status), std::string("metrale compile: ") + error);
  }
  std::unique_ptr<metrale_cuda_compile_result, metrale_cuda_compile_free_fn> result(raw, &compile_free);

  bool failed = false;
  double total_seconds = 0;
  for (uint32_t i = 0; i < result->module_count; ++i) {
    failed |= result->modules[i].status != METRALE_STATUS_OK;
    total_seconds += result->modules[i].seconds;
  }
  ctx.exit_code = failed ? kExitError : kExitOk;

  if (ctx.json) {
    auto list = nlohmann::json::array();
    for (uint32_t i = 0; i < result->module_count; ++i) list.push_back(module_json(result->modules[i]));
    nlohmann::json out{{"target", result->target},
                       {"nvrtc_version", result->nvrtc_version},
                       {"cuda_include_dir", result->cuda_include_dir},
                       {"cache_dir", *result->cache_dir ? nlohmann::json(result->cache_dir) : nlohmann::json(nullptr)},
                       {"plugin", manifest.library.string()},
                       {"manifest", manifest_path},
                       {"seconds", total_seconds},
                       {"ok", !failed},
                       {"modules", list}};
    std::cout << out.dump(2) << '\n';
    return;
  }

  std::vector<std::vector<std::string>> rows;
  for (uint32_t i = 0; i < result->module_count; ++i) {
    const auto& m = result->modules[i];
    const bool built = m.outcome == METRALE_CUDA_MODULE_COMPILED || m.outcome == METRALE_CUDA_MODULE_CACHED;
    std::vector<std::string> module_cells{m.module, outcome_name(m.outcome), built ? seconds_text(m.seconds) : "-",
                                          built ? bytes_text(m.image_bytes) : "-"};
    if (m.kernel_count == 0) {
      rows.push_back(module_cells);
      rows.back().insert(rows.back().end(), {"-", "-", "-", "-", "-", m.outcome == METRALE_CUDA_MODULE_GATED ? m.message : ""});
      continue;
    }
    for (uint32_t j = 0; j < m.kernel_count; ++j) {
      const auto& k = m.kernels[j];
      std::vector<std::string> row = j == 0 ? module_cells : std::vector<std::string>{"", "", "", ""};
      const std::string spills = k.spill_store_bytes < 0 ? "-"
                                 : number_or_dash(k.spill_store_bytes) + "/" + number_or_dash(k.spill_load_bytes);
      row.insert(row.end(), {k.name, number_or_dash(k.registers), spills, number_or_dash(k.stack_bytes),
                             number_or_dash(k.shared_bytes), k.problem});
      rows.push_back(std::move(row));
    }
  }
  std::cout << render_table({"module", "result", "time", "size", "kernel", "regs", "spill st/ld B", "stack B",
                             "smem B", "note"},
                            rows);
  std::cout << "target " << result->target << ", NVRTC " << result->nvrtc_version << ", headers "
            << result->cuda_include_dir << ", cache "
            << (*result->cache_dir ? result->cache_dir : "off") << ", total " << seconds_text(total_seconds) << '\n';
  for (uint32_t i = 0; i < result->module_count; ++i) {
    const auto& m = result->modules[i];
    if (m.status != METRALE_STATUS_OK) std::cout << '\n' << m.module << ": " << m.message << '\n';
  }
}

}  // namespace

void register_compile(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand(
      "compile", "Compile the CUDA backend's kernel modules with NVRTC for a target (no GPU needed) and fill the cache");
  auto options = std::make_shared<CompileOptions>();
  cmd->add_option("--target", options->target, "CUDA target: sm_80, sm_86, sm_90, sm_90a (an H100's own), ...")
      ->required();
  cmd->add_option("--module", options->modules, "Only this module (repeatable); default: every module");
  cmd->add_flag("--no-cache", options->no_cache, "Neither read nor write the compile cache");
  cmd->footer(
      "Cache: METRALE_CACHE_DIR, else $XDG_CACHE_HOME/metrale. Sources: METRALE_KERNEL_SRC first, then the "
      "installed kernel_src.\nExit codes: 0 every module compiled (or is gated for this target), 1 a module failed, "
      "2 unknown target or module.");
  cmd->callback([&ctx, options] { run_compile(ctx, *options); });
}

}  // namespace metrale::cli
