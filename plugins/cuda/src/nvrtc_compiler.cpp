// SPDX-License-Identifier: MIT OR Apache-2.0
#include "nvrtc_compiler.hpp"

#include "errors.hpp"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

namespace metrale::cuda {
namespace {

namespace fs = std::filesystem;

struct SourceFile {
  std::string include_name;  // as written in the #include (or the source's file name)
  fs::path path;
  std::string bytes;
};

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return out.str();
}

std::string join_paths(const std::vector<fs::path>& dirs) {
  std::string out;
  for (const auto& d : dirs) out += (out.empty() ? "" : ", ") + d.string();
  return out.empty() ? "(no kernel source directory was given)" : out;
}

// The #include "..." names a file mentions. Only quoted includes are project headers; angle
// brackets belong to the toolkit.
std::vector<std::string> quoted_includes(const std::string& text) {
  static const std::regex kInclude(R"re(^[ \t]*#[ \t]*include[ \t]*"([^"]+)")re", std::regex::multiline);
  std::vector<std::string> names;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kInclude); it != std::sregex_iterator(); ++it) {
    names.push_back((*it)[1].str());
  }
  return names;
}

// The module source and, transitively, every project header it includes.
struct ModuleSources {
  SourceFile main;
  std::vector<SourceFile> headers;  // sorted by include name
};

ModuleSources gather_sources(const CatalogModule& module, const std::vector<fs::path>& dirs) {
  ModuleSources sources;
  bool found = false;
  for (const auto& dir : dirs) {
    const fs::path candidate = dir / module.source;
    if (auto bytes = read_file(candidate)) {
      sources.main = {module.source, candidate, std::move(*bytes)};
      found = true;
      break;
    }
  }
  if (!found) {
    throw PluginError(METRALE_STATUS_NOT_FOUND, "kernel source " + module.source + " of module '" +
                                                    module.name + "' not found in: " + join_paths(dirs));
  }
  std::map<std::string, SourceFile> headers;
  std::vector<const SourceFile*> pending{&sources.main};
  while (!pending.empty()) {
    const SourceFile* file = pending.back();
    pending.pop_back();
    for (const auto& name : quoted_includes(file->bytes)) {
      if (headers.count(name) != 0) continue;
      // Like a compiler: the including file's directory first, then the source directories.
      std::vector<fs::path> search{file->path.parent_path()};
      search.insert(search.end(), dirs.begin(), dirs.end());
      std::optional<SourceFile> header;
      for (const auto& dir : search) {
        if (auto bytes = read_file(dir / name)) {
          header = SourceFile{name, dir / name, std::move(*bytes)};
          break;
        }
      }
      if (!header) {
        throw PluginError(METRALE_STATUS_NOT_FOUND, "header \"" + name + "\" included from " +
                                                        file->path.string() + " not found in: " + join_paths(search));
      }
      auto [it, inserted] = headers.emplace(name, std::move(*header));
      pending.push_back(&it->second);  // map nodes are stable
    }
  }
  for (auto& [name, file] : headers) sources.headers.push_back(std::move(file));
  return sources;
}

class Program {
 public:
  Program(const ModuleSources& sources) {
    std::vector<const char*> contents;
    std::vector<const char*> names;
    for (const auto& h : sources.headers) {
      contents.push_back(h.bytes.c_str());
      names.push_back(h.include_name.c_str());
    }
    // The program is named by its full path so NVRTC's diagnostics name the file a developer edits.
    const std::string name = sources.main.path.string();
    check(nvrtcCreateProgram(&program_, sources.main.bytes.c_str(), name.c_str(),
                             static_cast<int>(contents.size()), contents.data(), names.data()),
          "nvrtcCreateProgram");
  }
  ~Program() { nvrtcDestroyProgram(&program_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return program_; }

  static void check(nvrtcResult result, const char* call) {
    if (result == NVRTC_SUCCESS) return;
    throw PluginError(result == NVRTC_ERROR_OUT_OF_MEMORY ? METRALE_STATUS_OUT_OF_MEMORY : METRALE_STATUS_INTERNAL,
                      std::string(call) + " failed: " + nvrtcGetErrorString(result));
  }

 private:
  nvrtcProgram program_ = nullptr;
};

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : " ") + s;
  return out;
}

// "-arch=sm_90a" for a target NVRTC knows; for a device newer than NVRTC, PTX for the newest
// architecture it knows below the device (the driver JIT-compiles it); nullopt when none fits.
std::optional<std::pair<std::string, bool>> arch_option(const Target& target) {
  const auto archs = ModuleCompiler::supported_archs();
  if (std::find(archs.begin(), archs.end(), target.number) != archs.end()) {
    return std::pair{"-arch=" + target_name(target), true};
  }
  int best = 0;
  for (int a : archs) {
    if (a <= target.number && a > best) best = a;
  }
  // Generic PTX only: arch-specific features of an older architecture do not carry over.
  if (best == 0) return std::nullopt;
  return std::pair{"-arch=compute_" + std::to_string(best), false};
}

std::optional<uint32_t> number_before(const std::string& line, const std::string& unit) {
  const auto at = line.find(unit);
  if (at == std::string::npos) return std::nullopt;
  size_t begin = at;
  while (begin > 0 && line[begin - 1] == ' ') --begin;
  size_t end = begin;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  if (begin == end) return std::nullopt;
  return static_cast<uint32_t>(std::strtoul(line.substr(begin, end - begin).c_str(), nullptr, 10));
}

std::string quoted_after(const std::string& line, const std::string& prefix) {
  const auto at = line.find(prefix);
  if (at == std::string::npos) return "";
  const auto begin = at + prefix.size();
  const auto end = line.find('\'', begin);
  return end == std::string::npos ? "" : line.substr(begin, end - begin);
}

}  // namespace

std::vector<KernelStats> parse_ptxas_log(const std::string& log) {
  std::vector<KernelStats> stats;
  const auto entry = [&](const std::string& name) -> KernelStats& {
    for (auto& s : stats) {
      if (s.name == name) return s;
    }
    stats.push_back({name, {}, {}, {}, {}, {}});
    return stats.back();
  };
  std::istringstream in(log);
  std::string line;
  std::string compiling;   // after "Compiling entry function 'X'"
  std::string properties;  // after "Function properties for X"
  while (std::getline(in, line)) {
    if (!line.starts_with("ptxas")) continue;
    if (auto name = quoted_after(line, "Compiling entry function '"); !name.empty()) {
      compiling = name;
      entry(compiling);
    } else if (const auto at = line.find("Function properties for "); at != std::string::npos) {
      properties = line.substr(at + std::string_view("Function properties for ").size());
      while (!properties.empty() && std::isspace(static_cast<unsigned char>(properties.back()))) properties.pop_back();
    } else if (line.find("bytes stack frame") != std::string::npos && !properties.empty()) {
      // Only entry functions get a row; device functions' frames are not listed.
      for (auto& s : stats) {
        if (s.name != properties) continue;
        s.stack_bytes = number_before(line, "bytes stack frame");
        s.spill_store_bytes = number_before(line, "bytes spill stores");
        s.spill_load_bytes = number_before(line, "bytes spill loads");
      }
      properties.clear();
    } else if (line.find(" registers") != std::string::npos && !compiling.empty()) {
      auto& s = entry(compiling);
      s.registers = number_before(line, "registers");
      if (auto smem = number_before(line, "bytes smem")) s.shared_bytes = smem;
    }
  }
  return stats;
}

ModuleCompiler::ModuleCompiler(Settings settings) : settings_(std::move(settings)) {}

std::string ModuleCompiler::nvrtc_version() {
  int major = 0;
  int minor = 0;
  Program::check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<int> ModuleCompiler::supported_archs() {
  int count = 0;
  Program::check(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(static_cast<size_t>(count));
  if (count > 0) Program::check(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  return archs;
}

fs::path ModuleCompiler::cuda_include_dir() {
  static const std::optional<fs::path> found = []() -> std::optional<fs::path> {
    std::vector<fs::path> candidates;
#ifdef METRALE_CUDA_INCLUDE_DIR
    candidates.emplace_back(METRALE_CUDA_INCLUDE_DIR);  // the toolkit we were built against
#endif
    // The toolkit the loaded NVRTC belongs to: <root>/lib64/libnvrtc.so -> <root>/include.
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) != 0 && info.dli_fname != nullptr) {
      const fs::path lib = fs::path(info.dli_fname).parent_path();
      candidates.push_back(lib.parent_path() / "include");
      candidates.push_back(lib.parent_path().parent_path() / "include");
    }
    for (const char* var : {"CUDA_PATH", "CUDA_HOME"}) {
      if (const char* root = std::getenv(var); root != nullptr && *root != '\0') {
        candidates.push_back(fs::path(root) / "include");
      }
    }
    candidates.emplace_back("/usr/local/cuda/include");
    for (const auto& dir : candidates) {
      std::error_code ec;
      if (fs::is_regular_file(dir / "cuda_bf16.h", ec) && fs::is_regular_file(dir / "cuda_fp16.h", ec)) {
        return fs::weakly_canonical(dir, ec);
      }
    }
    return std::nullopt;
  }();
  if (!found) {
    throw PluginError(METRALE_STATUS_UNAVAILABLE,
                      "cannot find the CUDA toolkit headers (cuda_bf16.h) that NVRTC needs; "
                      "set CUDA_PATH to the toolkit root");
  }
  return *found;
}

namespace {

// Everything that can change the output: format, compiler, target, options, and the bytes of the
// source and each project header (names included: they decide what #include finds).
CacheKey module_cache_key(const CompiledModule& out, const ModuleSources& sources) {
  CacheKeyBuilder key;
  key.add("metrale-cuda-module").add(std::to_string(kCacheFormatVersion)).add(ModuleCompiler::nvrtc_version());
  key.add(out.target);
  for (const auto& option : out.options) key.add(option);
  key.add(sources.main.include_name).add(sources.main.bytes);
  for (const auto& h : sources.headers) key.add(h.include_name).add(h.bytes);
  return key.finish();
}

std::string program_log(const Program& program) {
  size_t log_size = 0;
  Program::check(nvrtcGetProgramLogSize(program.get(), &log_size), "nvrtcGetProgramLogSize");
  std::string log(log_size, '\0');
  if (log_size > 0) Program::check(nvrtcGetProgramLog(program.get(), log.data()), "nvrtcGetProgramLog");
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

// Compiles `sources` with out.options into out.image (a CUBIN when `cubin`, else PTX) and out.log.
void run_nvrtc(const ModuleSources& sources, bool cubin, CompiledModule& out) {
  Program program(sources);
  std::vector<const char*> argv;
  for (const auto& option : out.options) argv.push_back(option.c_str());
  const nvrtcResult result = nvrtcCompileProgram(program.get(), static_cast<int>(argv.size()), argv.data());
  std::string log = program_log(program);
  if (result != NVRTC_SUCCESS) {
    std::string message = "NVRTC could not compile module '" + out.module + "' (" + sources.main.path.string() +
                          ") for " + out.target + ": " + nvrtcGetErrorString(result) +
                          "\noptions: " + joined(out.options);
    for (const auto& h : sources.headers) message += "\nheader " + h.include_name + " = " + h.path.string();
    message += "\n" + log;
    throw PluginError(METRALE_STATUS_INTERNAL, message);
  }
  size_t size = 0;
  if (cubin) {
    Program::check(nvrtcGetCUBINSize(program.get(), &size), "nvrtcGetCUBINSize");
    out.image.resize(size);
    if (size > 0) Program::check(nvrtcGetCUBIN(program.get(), reinterpret_cast<char*>(out.image.data())), "nvrtcGetCUBIN");
  } else {
    Program::check(nvrtcGetPTXSize(program.get(), &size), "nvrtcGetPTXSize");
    out.image.resize(size);
    if (size > 0) Program::check(nvrtcGetPTX(program.get(), reinterpret_cast<char*>(out.image.data())), "nvrtcGetPTX");
  }
  out.is_cubin = cubin;
  if (out.image.empty()) {
    throw PluginError(METRALE_STATUS_INTERNAL, "NVRTC produced an empty image for module '" + out.module +
                                                   "' with " + joined(out.options));
  }
  out.log = std::move(log);
}

// Resource usage: registers from the CUBIN itself, the rest from ptxas' report.
void read_resource_usage(CompiledModule& out) {
  if (out.is_cubin) {
    try {
      out.cubin = read_cubin(out.image);
    } catch (const CubinError& e) {
      throw PluginError(METRALE_STATUS_INTERNAL, "module '" + out.module + "': NVRTC output is not a valid CUBIN: " + e.what());
    }
  }
  out.stats = parse_ptxas_log(out.log);
  if (!out.cubin) return;
  for (const auto& k : out.cubin->kernels) {
    auto it = std::find_if(out.stats.begin(), out.stats.end(), [&](const KernelStats& s) { return s.name == k.name; });
    if (it == out.stats.end()) {
      out.stats.push_back({k.name, {}, {}, {}, {}, {}});
      it = std::prev(out.stats.end());
    }
    if (k.registers) it->registers = k.registers;
  }
}

}  // namespace

CompiledModule ModuleCompiler::compile(const CatalogModule& module, const Target& target) const {
  const auto start = std::chrono::steady_clock::now();
  CompiledModule out;
  out.module = module.name;
  out.target = target_name(target);

  const auto arch = arch_option(target);
  if (!arch) {
    throw PluginError(METRALE_STATUS_INCOMPATIBLE, "NVRTC " + nvrtc_version() + " cannot compile for " +
                                                       out.target + " (module '" + module.name + "')");
  }
  const ModuleSources sources = gather_sources(module, settings_.source_dirs);
  out.source_path = sources.main.path;
  out.options = {arch->first, "-std=c++17", "-I" + cuda_include_dir().string(), "-Xptxas=-v"};
  const CacheKey cache_key = module_cache_key(out, sources);

  std::optional<CompileCache> cache;
  if (settings_.cache_dir) cache.emplace(*settings_.cache_dir, settings_.log);
  out.cache_used = cache.has_value();
  std::optional<CacheEntry> hit;
  if (cache) hit = cache->load(cache_key);

  if (hit) {
    out.cache_hit = true;
    out.image = std::move(hit->image);
    out.is_cubin = hit->is_cubin;
    out.log = std::move(hit->log);
    settings_.log.debug("module '" + module.name + "' for " + out.target + ": cache hit " +
                        cache->entry_path(cache_key).string());
  } else {
    run_nvrtc(sources, arch->second, out);
    if (cache) cache->store(cache_key, {out.image, out.is_cubin, out.log});
    settings_.log.debug("module '" + module.name + "' compiled for " + out.target + " (" +
                        std::to_string(out.image.size()) + " bytes)");
  }
  read_resource_usage(out);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string check_kernel(const CatalogKernel& kernel, const CompiledModule& compiled) {
  if (!compiled.cubin) return "";  // PTX: the driver will say whether the entry exists
  const CubinKernel* found = compiled.cubin->find(kernel.name);
  if (found == nullptr) {
    std::string have;
    for (const auto& k : compiled.cubin->kernels) have += (have.empty() ? "" : ", ") + k.name;
    return "the compiled module '" + compiled.module + "' (" + compiled.source_path.string() +
           ") has no kernel " + kernel.name + " (it has: " + (have.empty() ? "none" : have) + ")";
  }
  const auto manifest_list = [&] {
    std::string s;
    for (auto t : kernel.params) s += (s.empty() ? "" : ", ") + std::string(param_type_text(t));
    return "(" + s + ")";
  };
  if (found->params.size() != kernel.params.size()) {
    return "kernel " + kernel.name + " takes " + std::to_string(found->params.size()) +
           " parameters in " + compiled.source_path.string() + " but the manifest lists " +
           std::to_string(kernel.params.size()) + " " + manifest_list();
  }
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    if (found->params[i].size != param_size(kernel.params[i])) {
      return "kernel " + kernel.name + " parameter " + std::to_string(i) + " is " +
             std::to_string(found->params[i].size) + " bytes in the compiled code but the manifest says " +
             param_type_text(kernel.params[i]) + " " + manifest_list();
    }
  }
  return "";
}

}  // namespace metrale::cuda
