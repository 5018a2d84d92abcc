// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale compile --target sm_XX [--module M]...`: compile the CUDA backend's kernel modules with
// NVRTC for a target, without a GPU or a driver, through the compile cache; print per module the
// time, image size and cache hit, and per kernel registers, spills, stack and shared memory.
//
// The metrale binary does not link NVRTC, nor load anything itself: the registry discovers the
// cuda backend (handshake, checksum pin, METRALE_BACKENDS_DISABLE, as for any use of a backend)
// and hands out the plugin's compile extension (runtime/abi/metrale/cuda_compile.h),
// which works without a device. Kernel source and cache directories are the runtime's. Progress
// goes to stderr, one line as each module starts and ends; the table (or --json) to stdout.
#include "commands.hpp"

#include <metrale/cuda_compile.h>
#include <metrale/log.hpp>
#include <metrale/paths.hpp>
#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace metrale::cli {

namespace {

struct CompileOptions {
  std::string target;
  std::vector<std::string> modules;
  bool no_cache = false;
};

constexpr const char* kBackend = "cuda";

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

using ResultPtr = std::unique_ptr<metrale_cuda_compile_result, metrale_cuda_compile_free_fn>;

// What one compile run produced, before it is rendered.
struct CompileReport {
  ResultPtr result{nullptr, nullptr};
  std::string plugin;    // the library that compiled
  std::string manifest;  // the manifest that named it
  bool failed = false;   // a module failed
  double total_seconds = 0;
};

// The request's strings and arrays, alive for the duration of the call.
struct RequestStorage {
  std::vector<std::string> dir_text;
  std::vector<const char*> dirs;
  std::vector<const char*> modules;
  std::string cache;
  std::string manifest_path;
};

metrale_cuda_compile_request make_request(const CompileOptions& options, const Manifest& manifest,
                                          RequestStorage& storage, Progress& progress) {
  for (const auto& dir : kernel_source_dirs()) storage.dir_text.push_back(dir.string());
  for (const auto& dir : storage.dir_text) storage.dirs.push_back(dir.c_str());
  for (const auto& m : options.modules) storage.modules.push_back(m.c_str());
  storage.cache = options.no_cache ? std::string() : cache_dir().value_or(std::filesystem::path()).string();
  storage.manifest_path = manifest.path.string();

  metrale_cuda_compile_request request{};
  request.struct_size = sizeof(request);
  request.target = options.target.c_str();
  request.manifest_json = manifest.text.c_str();
  request.manifest_path = storage.manifest_path.c_str();
  request.kernel_source_dirs = storage.dirs.data();
  request.kernel_source_dir_count = static_cast<uint32_t>(storage.dirs.size());
  request.cache_dir = storage.cache.empty() ? nullptr : storage.cache.c_str();
  request.modules = storage.modules.empty() ? nullptr : storage.modules.data();
  request.module_count = static_cast<uint32_t>(storage.modules.size());
  request.user = &progress;
  request.log = [](void*, metrale_log_level level, const char* message) {
    plugin_log_callback(const_cast<char*>(kBackend), level, message);
  };
  request.progress = &Progress::callback;
  return request;
}

// Runs the plugin's compile extension; nullopt (exit code 2 set) for a target or module the plugin
// cannot take, which is the user's request rather than a failure inside.
std::optional<CompileReport> compile_report(CliContext& ctx, const CompileOptions& options) {
  const Extension compile_ext = ctx.registry().extension(kBackend, METRALE_CUDA_COMPILE_NAME);
  const Extension free_ext = ctx.registry().extension(kBackend, METRALE_CUDA_COMPILE_FREE_NAME);
  const Manifest& manifest = compile_ext.manifest;

  Progress progress;
  progress.target = options.target;
  progress.total = static_cast<uint32_t>(options.modules.empty() ? manifest.modules.size() : options.modules.size());
  RequestStorage storage;
  const metrale_cuda_compile_request request = make_request(options, manifest, storage, progress);

  char error[4096] = {};
  metrale_cuda_compile_result* raw = nullptr;
  const metrale_status status = compile_ext.as<metrale_cuda_compile_fn>()(&request, &raw, error, sizeof(error));
  if (status == METRALE_STATUS_INVALID_ARGUMENT || status == METRALE_STATUS_NOT_FOUND) {
    logger()->error("{}", error);
    ctx.exit_code = kExitUsage;
    return std::nullopt;
  }
  if (status != METRALE_STATUS_OK) throw Error(status_from_abi(status), std::string("metrale compile: ") + error);

  CompileReport report;
  report.result = ResultPtr(raw, free_ext.as<metrale_cuda_compile_free_fn>());
  report.plugin = manifest.library.string();
  report.manifest = storage.manifest_path;
  for (uint32_t i = 0; i < raw->module_count; ++i) {
    report.failed |= raw->modules[i].status != METRALE_STATUS_OK;
    report.total_seconds += raw->modules[i].seconds;
  }
  return report;
}

void render_json(const CompileReport& report) {
  const metrale_cuda_compile_result& result = *report.result;
  auto list = nlohmann::json::array();
  for (uint32_t i = 0; i < result.module_count; ++i) list.push_back(module_json(result.modules[i]));
  nlohmann::json out{{"target", result.target},
                     {"nvrtc_version", result.nvrtc_version},
                     {"cuda_include_dir", result.cuda_include_dir},
                     {"cache_dir", *result.cache_dir ? nlohmann::json(result.cache_dir) : nlohmann::json(nullptr)},
                     {"plugin", report.plugin},
                     {"manifest", report.manifest},
                     {"seconds", report.total_seconds},
                     {"ok", !report.failed},
                     {"modules", list}};
  std::cout << out.dump(2) << '\n';
}

// The table's rows of one module: the module's cells, then one row per kernel.
void module_rows(const metrale_cuda_module_report& m, std::vector<std::vector<std::string>>& rows) {
  const bool built = m.outcome == METRALE_CUDA_MODULE_COMPILED || m.outcome == METRALE_CUDA_MODULE_CACHED;
  std::vector<std::string> module_cells{m.module, outcome_name(m.outcome), built ? seconds_text(m.seconds) : "-",
                                        built ? bytes_text(m.image_bytes) : "-"};
  if (m.kernel_count == 0) {
    rows.push_back(module_cells);
    rows.back().insert(rows.back().end(), {"-", "-", "-", "-", "-", m.outcome == METRALE_CUDA_MODULE_GATED ? m.message : ""});
    return;
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

void render_text(const CompileReport& report) {
  const metrale_cuda_compile_result& result = *report.result;
  std::vector<std::vector<std::string>> rows;
  for (uint32_t i = 0; i < result.module_count; ++i) module_rows(result.modules[i], rows);
  std::cout << render_table({"module", "result", "time", "size", "kernel", "regs", "spill st/ld B", "stack B",
                             "smem B", "note"},
                            rows);
  std::cout << "target " << result.target << ", NVRTC " << result.nvrtc_version << ", headers "
            << result.cuda_include_dir << ", cache " << (*result.cache_dir ? result.cache_dir : "off") << ", total "
            << seconds_text(report.total_seconds) << '\n';
  for (uint32_t i = 0; i < result.module_count; ++i) {
    const auto& m = result.modules[i];
    if (m.status != METRALE_STATUS_OK) std::cout << '\n' << m.module << ": " << m.message << '\n';
  }
}

void run_compile(CliContext& ctx, const CompileOptions& options) {
  const std::optional<CompileReport> report = compile_report(ctx, options);
  if (!report) return;
  ctx.exit_code = report->failed ? kExitError : kExitOk;
  if (ctx.json) render_json(*report);
  else render_text(*report);
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
      "2 unknown target or module, 3 the cuda backend is disabled (METRALE_BACKENDS_DISABLE) or cannot be used.");
  cmd->callback([&ctx, options] { run_compile(ctx, *options); });
}

}  // namespace metrale::cli
