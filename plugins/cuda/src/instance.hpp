// SPDX-License-Identifier: MIT OR Apache-2.0
// One backend instance: one CUDA device through its primary context, the manifest's modules
// compiled lazily on first lookup, device memory, streams and launches. Every method may throw
// PluginError; the C entry points in plugin.cpp turn that into a status and last_error.
#pragma once

#include "catalog.hpp"
#include "driver.hpp"
#include "host_log.hpp"
#include "nvrtc_compiler.hpp"
#include "targets.hpp"

#include <metrale/plugin_abi.h>

#include <cuda.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace metrale::cuda {

class Instance {
 public:
  explicit Instance(const metrale_backend_create_info& info);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  void device_info(metrale_device_info* out) const;
  void list_kernels(const metrale_kernel_desc** kernels, size_t* count) const;
  uint64_t get_kernel(const char* module, const char* name);

  uint64_t mem_alloc(size_t bytes);
  void mem_free(uint64_t ptr);
  void copy_to_device(uint64_t dst, const void* src, size_t bytes, uint64_t stream);
  void copy_to_host(void* dst, uint64_t src, size_t bytes, uint64_t stream);
  void copy_device(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream);
  void memset_device(uint64_t dst, uint8_t value, size_t bytes, uint64_t stream);

  uint64_t stream_create();
  void stream_destroy(uint64_t stream);
  void stream_synchronize(uint64_t stream);

  void launch(uint64_t kernel, const metrale_launch_config* config, void* const* args, size_t arg_count);

  // Per-thread message of the last failed call on this instance.
  void set_last_error(std::string message);
  const char* last_error() const;

  const Target& target() const noexcept { return target_; }

 private:
  struct ModuleState {
    const CatalogModule* spec = nullptr;
    std::mutex mutex;  // held while compiling, so each module compiles once
    bool attempted = false;
    CUmodule module = nullptr;
    std::optional<CompiledModule> compiled;  // image dropped after loading
    std::optional<PluginError> failure;      // remembered: a broken module is not recompiled per lookup
  };
  struct KernelEntry {
    std::string module;
    std::string name;
    CUfunction function = nullptr;
    size_t param_count = 0;
    uint32_t dynamic_smem_allowed = 48 * 1024;  // what cuFuncSetAttribute has allowed so far
  };

  // Finds the device, reads what device_info reports and makes its primary context current.
  void open_device(const std::string& driver_path);
  void make_current() const;
  ModuleState& load_module(const CatalogModule& module);
  CUstream stream_of(uint64_t id) const;
  void check_range(uint64_t ptr, size_t bytes, const char* what) const;

  HostLog log_;
  std::shared_ptr<const Driver> driver_;
  Catalog catalog_;
  std::unique_ptr<ModuleCompiler> compiler_;
  uint32_t device_index_ = 0;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  Target target_;
  std::string device_name_;
  std::string target_text_;
  uint64_t memory_bytes_ = 0;
  uint32_t sm_count_ = 0;

  mutable std::mutex mutex_;  // guards everything below
  std::map<std::string, std::unique_ptr<ModuleState>, std::less<>> modules_;
  std::deque<KernelEntry> kernels_;  // handle = index + 1; deque keeps entries in place
  std::map<std::string, uint64_t, std::less<>> handles_;  // "module/name" -> handle
  std::map<uint64_t, size_t> allocations_;                // device address -> bytes
  std::map<uint64_t, CUstream> streams_;
  uint64_t next_stream_ = 1;
  std::map<std::thread::id, std::string> errors_;
};

// The driver library create() and device_count() load when no "driver" option says otherwise.
inline constexpr const char* kDefaultDriver = "libcuda.so.1";

}  // namespace metrale::cuda

// The ABI's opaque instance type is this plugin's Instance.
struct metrale_backend final : metrale::cuda::Instance {
  using Instance::Instance;
};
