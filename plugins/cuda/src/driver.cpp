// SPDX-License-Identifier: MIT OR Apache-2.0
#include "driver.hpp"

#include <dlfcn.h>

#include <map>
#include <mutex>

namespace metrale::cuda {

// One case per CUresult the driver headers declare.
// code-shape: data table
const char* cuda_error_name(CUresult result) noexcept {
  switch (result) {
#define METRALE_CU_ERROR(name) \
  case name:                   \
    return #name;
    METRALE_CU_ERROR(CUDA_SUCCESS)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_VALUE)
    METRALE_CU_ERROR(CUDA_ERROR_OUT_OF_MEMORY)
    METRALE_CU_ERROR(CUDA_ERROR_NOT_INITIALIZED)
    METRALE_CU_ERROR(CUDA_ERROR_DEINITIALIZED)
    METRALE_CU_ERROR(CUDA_ERROR_PROFILER_DISABLED)
    METRALE_CU_ERROR(CUDA_ERROR_PROFILER_NOT_INITIALIZED)
    METRALE_CU_ERROR(CUDA_ERROR_PROFILER_ALREADY_STARTED)
    METRALE_CU_ERROR(CUDA_ERROR_PROFILER_ALREADY_STOPPED)
    METRALE_CU_ERROR(CUDA_ERROR_STUB_LIBRARY)
    METRALE_CU_ERROR(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER)
    METRALE_CU_ERROR(CUDA_ERROR_DEVICE_UNAVAILABLE)
    METRALE_CU_ERROR(CUDA_ERROR_NO_DEVICE)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_DEVICE)
    METRALE_CU_ERROR(CUDA_ERROR_DEVICE_NOT_LICENSED)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_IMAGE)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_CONTEXT)
    METRALE_CU_ERROR(CUDA_ERROR_CONTEXT_ALREADY_CURRENT)
    METRALE_CU_ERROR(CUDA_ERROR_MAP_FAILED)
    METRALE_CU_ERROR(CUDA_ERROR_UNMAP_FAILED)
    METRALE_CU_ERROR(CUDA_ERROR_ARRAY_IS_MAPPED)
    METRALE_CU_ERROR(CUDA_ERROR_ALREADY_MAPPED)
    METRALE_CU_ERROR(CUDA_ERROR_NO_BINARY_FOR_GPU)
    METRALE_CU_ERROR(CUDA_ERROR_ALREADY_ACQUIRED)
    METRALE_CU_ERROR(CUDA_ERROR_NOT_MAPPED)
    METRALE_CU_ERROR(CUDA_ERROR_NOT_MAPPED_AS_ARRAY)
    METRALE_CU_ERROR(CUDA_ERROR_NOT_MAPPED_AS_POINTER)
    METRALE_CU_ERROR(CUDA_ERROR_ECC_UNCORRECTABLE)
    METRALE_CU_ERROR(CUDA_ERROR_UNSUPPORTED_LIMIT)
    METRALE_CU_ERROR(CUDA_ERROR_CONTEXT_ALREADY_IN_USE)
    METRALE_CU_ERROR(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_PTX)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT)
    METRALE_CU_ERROR(CUDA_ERROR_NVLINK_UNCORRECTABLE)
    METRALE_CU_ERROR(CUDA_ERROR_JIT_COMPILER_NOT_FOUND)
    METRALE_CU_ERROR(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
    METRALE_CU_ERROR(CUDA_ERROR_JIT_COMPILATION_DISABLED)
    METRALE_CU_ERROR(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY)
    METRALE_CU_ERROR(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC)
    METRALE_CU_ERROR(CUDA_ERROR_CONTAINED)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_SOURCE)
    METRALE_CU_ERROR(CUDA_ERROR_FILE_NOT_FOUND)
    METRALE_CU_ERROR(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND)
    METRALE_CU_ERROR(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED)
    METRALE_CU_ERROR(CUDA_ERROR_OPERATING_SYSTEM)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_HANDLE)
    METRALE_CU_ERROR(CUDA_ERROR_ILLEGAL_STATE)
    METRALE_CU_ERROR(CUDA_ERROR_LOSSY_QUERY)
    METRALE_CU_ERROR(CUDA_ERROR_NOT_FOUND)
    METRALE_CU_ERROR(CUDA_ERROR_NOT_READY)
    METRALE_CU_ERROR(CUDA_ERROR_ILLEGAL_ADDRESS)
    METRALE_CU_ERROR(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    METRALE_CU_ERROR(CUDA_ERROR_LAUNCH_TIMEOUT)
    METRALE_CU_ERROR(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING)
    METRALE_CU_ERROR(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
    METRALE_CU_ERROR(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)
    METRALE_CU_ERROR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE)
    METRALE_CU_ERROR(CUDA_ERROR_CONTEXT_IS_DESTROYED)
    METRALE_CU_ERROR(CUDA_ERROR_ASSERT)
    METRALE_CU_ERROR(CUDA_ERROR_TOO_MANY_PEERS)
    METRALE_CU_ERROR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
    METRALE_CU_ERROR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
    METRALE_CU_ERROR(CUDA_ERROR_HARDWARE_STACK_ERROR)
    METRALE_CU_ERROR(CUDA_ERROR_ILLEGAL_INSTRUCTION)
    METRALE_CU_ERROR(CUDA_ERROR_MISALIGNED_ADDRESS)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_ADDRESS_SPACE)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_PC)
    METRALE_CU_ERROR(CUDA_ERROR_LAUNCH_FAILED)
    METRALE_CU_ERROR(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
    METRALE_CU_ERROR(CUDA_ERROR_TENSOR_MEMORY_LEAK)
    METRALE_CU_ERROR(CUDA_ERROR_NOT_PERMITTED)
    METRALE_CU_ERROR(CUDA_ERROR_NOT_SUPPORTED)
    METRALE_CU_ERROR(CUDA_ERROR_SYSTEM_NOT_READY)
    METRALE_CU_ERROR(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
    METRALE_CU_ERROR(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)
    METRALE_CU_ERROR(CUDA_ERROR_MPS_CONNECTION_FAILED)
    METRALE_CU_ERROR(CUDA_ERROR_MPS_RPC_FAILURE)
    METRALE_CU_ERROR(CUDA_ERROR_MPS_SERVER_NOT_READY)
    METRALE_CU_ERROR(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED)
    METRALE_CU_ERROR(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED)
    METRALE_CU_ERROR(CUDA_ERROR_MPS_CLIENT_TERMINATED)
    METRALE_CU_ERROR(CUDA_ERROR_CDP_NOT_SUPPORTED)
    METRALE_CU_ERROR(CUDA_ERROR_CDP_VERSION_MISMATCH)
    METRALE_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    METRALE_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    METRALE_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_MERGE)
    METRALE_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)
    METRALE_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNJOINED)
    METRALE_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_ISOLATION)
    METRALE_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
    METRALE_CU_ERROR(CUDA_ERROR_CAPTURED_EVENT)
    METRALE_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
    METRALE_CU_ERROR(CUDA_ERROR_TIMEOUT)
    METRALE_CU_ERROR(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE)
    METRALE_CU_ERROR(CUDA_ERROR_EXTERNAL_DEVICE)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_CLUSTER_SIZE)
    METRALE_CU_ERROR(CUDA_ERROR_FUNCTION_NOT_LOADED)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_RESOURCE_TYPE)
    METRALE_CU_ERROR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION)
    METRALE_CU_ERROR(CUDA_ERROR_KEY_ROTATION)
    METRALE_CU_ERROR(CUDA_ERROR_UNKNOWN)
#undef METRALE_CU_ERROR
  }
  return "CUDA_ERROR_UNRECOGNIZED";
}

metrale_status status_for(CUresult result) noexcept {
  switch (result) {
    case CUDA_SUCCESS:
      return METRALE_STATUS_OK;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return METRALE_STATUS_OUT_OF_MEMORY;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
      return METRALE_STATUS_INVALID_ARGUMENT;
    case CUDA_ERROR_NOT_FOUND:
      return METRALE_STATUS_NOT_FOUND;
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_DEVICE_NOT_LICENSED:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      return METRALE_STATUS_UNAVAILABLE;
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
      return METRALE_STATUS_INCOMPATIBLE;
    default:
      return METRALE_STATUS_INTERNAL;
  }
}

void Driver::check(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  throw PluginError(status_for(result), std::string(call) + " failed: " + cuda_error_name(result) +
                                            " (" + std::to_string(static_cast<int>(result)) + ")");
}

void Driver::open() {
  handle_ = ::dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* why = ::dlerror();
    throw PluginError(METRALE_STATUS_UNAVAILABLE,
                      "no CUDA driver: cannot load " + path_ + ": " + (why ? why : "unknown dlopen error"));
  }
  // Resolve everything up front: a driver too old for one call is unavailable as a whole.
#define METRALE_CU_RESOLVE(name)                                                               \
  {                                                                                            \
    void* symbol = ::dlsym(handle_, METRALE_CU_SYMBOL(name));                                  \
    if (symbol == nullptr) {                                                                   \
      throw PluginError(METRALE_STATUS_UNAVAILABLE, "CUDA driver " + path_ + " lacks " +       \
                                                        METRALE_CU_SYMBOL(name) +              \
                                                        " (driver older than CUDA 12?)");      \
    }                                                                                          \
    name = reinterpret_cast<decltype(name)>(symbol);                                           \
  }
  METRALE_CUDA_DRIVER_API(METRALE_CU_RESOLVE)
#undef METRALE_CU_RESOLVE
}

int Driver::version() const noexcept {
  int version = 0;
  return cuDriverGetVersion(&version) == CUDA_SUCCESS ? version : 0;
}

std::shared_ptr<const Driver> Driver::load(const std::string& path) {
  // Leaked on purpose: drivers stay loaded until the process exits, and no destructor may run
  // against a driver that is being torn down at exit.
  static std::mutex* mutex = new std::mutex;
  static auto* cache = new std::map<std::string, std::shared_ptr<Driver>>;
  std::shared_ptr<Driver> driver;
  {
    std::lock_guard lock(*mutex);
    auto it = cache->find(path);
    if (it != cache->end()) {
      driver = it->second;
    } else {
      driver = std::shared_ptr<Driver>(new Driver(path));
      driver->open();  // throws before anything is cached
      cache->emplace(path, driver);
    }
  }
  // cuInit runs on every load (it is idempotent) so a driver that starts failing is noticed.
  const CUresult init = driver->cuInit(0);
  if (init == CUDA_ERROR_STUB_LIBRARY) {
    throw PluginError(METRALE_STATUS_UNAVAILABLE,
                      "no CUDA driver: " + path + " is the toolkit's stub library (cuInit: "
                      "CUDA_ERROR_STUB_LIBRARY (34)); install the NVIDIA driver");
  }
  if (init != CUDA_SUCCESS) {
    throw PluginError(METRALE_STATUS_UNAVAILABLE, "CUDA driver " + path + ": cuInit failed: " +
                                                      cuda_error_name(init) + " (" +
                                                      std::to_string(static_cast<int>(init)) + ")");
  }
  return driver;
}

}  // namespace metrale::cuda
