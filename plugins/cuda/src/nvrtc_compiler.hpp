// SPDX-License-Identifier: MIT OR Apache-2.0
// Compiles one manifest module with NVRTC for one target, through the on-disk cache.
//
// The source is looked up in the kernel source directories in order (an override directory
// first); every project header it includes with #include "..." is found the same way, read, and
// handed to NVRTC in memory, so exactly the bytes that were hashed into the cache key are the
// bytes compiled. System headers (<cuda_bf16.h>) come from the toolkit's include directory.
#pragma once

#include "catalog.hpp"
#include "compile_cache.hpp"
#include "cubin.hpp"
#include "host_log.hpp"
#include "targets.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace metrale::cuda {

struct KernelStats {
  std::string name;
  std::optional<uint32_t> registers;
  std::optional<uint32_t> spill_store_bytes;
  std::optional<uint32_t> spill_load_bytes;
  std::optional<uint32_t> stack_bytes;
  std::optional<uint32_t> shared_bytes;  // static shared memory
};

struct CompiledModule {
  std::string module;
  std::filesystem::path source_path;
  std::string target;                 // what was asked for, e.g. "sm_90a"
  std::vector<std::string> options;   // as passed to NVRTC
  std::vector<std::byte> image;       // CUBIN, or PTX text when is_cubin is false
  bool is_cubin = true;
  std::string log;                    // NVRTC's log (ptxas resource usage)
  bool cache_used = false;            // a cache directory was configured
  bool cache_hit = false;
  double seconds = 0;                 // wall time of this compile (or cache read)
  std::optional<CubinInfo> cubin;     // parsed when is_cubin
  std::vector<KernelStats> stats;     // one per kernel found in the image
};

class ModuleCompiler {
 public:
  struct Settings {
    std::vector<std::filesystem::path> source_dirs;
    std::optional<std::filesystem::path> cache_dir;  // none: no cache
    HostLog log;
  };
  explicit ModuleCompiler(Settings settings);

  // Throws PluginError: NOT_FOUND (source or header missing), INCOMPATIBLE (NVRTC cannot target
  // this), INTERNAL (compile error: module, source, options and NVRTC's log in the message).
  CompiledModule compile(const CatalogModule& module, const Target& target) const;

  const std::vector<std::filesystem::path>& source_dirs() const noexcept { return settings_.source_dirs; }

  static std::string nvrtc_version();        // "13.0"
  static std::vector<int> supported_archs();  // {75, 80, ..., 121}
  // The toolkit include directory holding cuda_bf16.h; throws PluginError(UNAVAILABLE).
  static std::filesystem::path cuda_include_dir();

 private:
  Settings settings_;
};

// Why `kernel` cannot be used from this compiled module ("" when it can): absent from the
// CUBIN's symbol table, or a parameter list that differs from the manifest's.
std::string check_kernel(const CatalogKernel& kernel, const CompiledModule& compiled);

// Parses ptxas' -v report in an NVRTC log; exposed for tests.
std::vector<KernelStats> parse_ptxas_log(const std::string& log);

}  // namespace metrale::cuda
