// SPDX-License-Identifier: MIT OR Apache-2.0
// The CUDA driver, reached through dlopen so the plugin loads (and reports "unavailable") on
// machines without one. Every symbol is looked up by the name cuda.h's own macros give it
// (cuMemAlloc -> cuMemAlloc_v2, cuStreamDestroy -> cuStreamDestroy_v2), so the loader, the
// prototypes and any fake driver built from the same header agree on the ABI of each call.
#pragma once

#include "errors.hpp"

#include <cuda.h>

#include <memory>
#include <string>

namespace metrale::cuda {

// Expands the API name through cuda.h's macros before stringizing: the versioned symbol.
#define METRALE_CU_STRINGIZE_(name) #name
#define METRALE_CU_SYMBOL(name) METRALE_CU_STRINGIZE_(name)

// Every driver entry point the plugin calls. A member is named after the API, which cuda.h's
// macros rename exactly as they rename the call sites, so `drv.cuMemAlloc(...)` works.
#define METRALE_CUDA_DRIVER_API(X) \
  X(cuInit)                        \
  X(cuDriverGetVersion)            \
  X(cuDeviceGetCount)              \
  X(cuDeviceGet)                   \
  X(cuDeviceGetName)               \
  X(cuDeviceGetAttribute)          \
  X(cuDeviceTotalMem)              \
  X(cuDevicePrimaryCtxRetain)      \
  X(cuDevicePrimaryCtxRelease)     \
  X(cuCtxSetCurrent)               \
  X(cuStreamCreate)                \
  X(cuStreamDestroy)               \
  X(cuStreamSynchronize)           \
  X(cuMemAlloc)                    \
  X(cuMemFree)                     \
  X(cuMemcpyHtoDAsync)             \
  X(cuMemcpyDtoHAsync)             \
  X(cuMemcpyDtoDAsync)             \
  X(cuMemsetD8Async)               \
  X(cuModuleLoadData)              \
  X(cuModuleUnload)                \
  X(cuModuleGetFunction)           \
  X(cuFuncSetAttribute)            \
  X(cuLaunchKernel)

// "CUDA_ERROR_OUT_OF_MEMORY"; "CUDA_ERROR_<n>" for codes this table does not know. Our own
// table: the stub driver answers cuGetErrorName with an error too.
const char* cuda_error_name(CUresult result) noexcept;
// The plugin status a failing driver call maps to.
metrale_status status_for(CUresult result) noexcept;

class Driver {
 public:
  // dlopen(path) and resolve every entry point, then cuInit(0). Throws PluginError
  // (UNAVAILABLE) saying which step failed: library missing, symbol missing, stub library,
  // cuInit's error. Drivers are cached per path for the life of the process and never unloaded
  // (a CUDA driver does not support being unloaded).
  static std::shared_ptr<const Driver> load(const std::string& path);

  // Throws PluginError(status_for(result)) "<call>: <NAME> (<code>)" unless result is success.
  static void check(CUresult result, const char* call);
  static void check(CUresult result, const std::string& call) { check(result, call.c_str()); }

  const std::string& path() const noexcept { return path_; }
  // cuDriverGetVersion, e.g. 13000; 0 when the driver does not say.
  int version() const noexcept;

#define METRALE_CU_MEMBER(name) decltype(&::name) name = nullptr;
  METRALE_CUDA_DRIVER_API(METRALE_CU_MEMBER)
#undef METRALE_CU_MEMBER

 private:
  explicit Driver(std::string path) : path_(std::move(path)) {}
  void open();
  std::string path_;
  void* handle_ = nullptr;
};

}  // namespace metrale::cuda
