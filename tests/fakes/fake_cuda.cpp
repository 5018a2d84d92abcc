// SPDX-License-Identifier: MIT OR Apache-2.0
// A fake CUDA driver: a test double for libcuda.so.1 that exports, under the versioned names
// cuda.h gives them, the driver calls the CUDA plugin makes. Host memory stands in for device
// memory, so copies round-trip. Modules must be real CUBINs: the ELF image is parsed, its
// architecture checked against the fake device, and cuModuleGetFunction succeeds only for
// kernels in its symbol table. Launches run nothing; they are recorded with their arguments,
// sized from the CUBIN's parameter table as the real driver sizes them.
//
// Configured per call from the environment, so one test process can change it between cases:
//   FAKECUDA_DEVICES  number of devices (default 1; 0 for none)
//   FAKECUDA_CC       compute capability per device, comma-separated ("8.0", "8.0,9.0"; default 8.0)
//   FAKECUDA_MEMORY   bytes of memory per device (default 16 GiB); allocations beyond fail
//   FAKECUDA_FAIL     comma-separated "symbol[=code][@n]": that call fails with CUresult `code`
//                     (default 999, CUDA_ERROR_UNKNOWN) from its n-th call on (default 1st).
//                     `symbol` is the exported name (cuMemAlloc_v2) or the API name (cuMemAlloc).
//   FAKECUDA_LOG      file that gets one line per module load, function lookup and launch
#include "cubin.hpp"

// Only the driver API is exported (as the real libcuda does); the CUBIN reader stays hidden.
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#define FAKE_STRINGIZE_(name) #name
#define FAKE_SYMBOL(name) FAKE_STRINGIZE_(name)

namespace {

using metrale::cuda::CubinInfo;

struct FakeContext {
  int device = 0;
  int retains = 0;
};

struct FakeModule {
  bool ptx = false;
  CubinInfo cubin;
  std::string ptx_text;
};

struct FakeFunction {
  FakeModule* module = nullptr;
  std::string name;
  std::vector<metrale::cuda::CubinParam> params;  // empty for PTX (unknown layout)
  int max_dynamic_smem = 48 * 1024;
};

struct FakeStream {
  int id = 0;
};

std::recursive_mutex g_mutex;
bool g_initialized = false;
std::map<int, FakeContext> g_contexts;  // one primary context per device
thread_local FakeContext* t_current = nullptr;
std::map<uintptr_t, size_t> g_allocations;
size_t g_allocated = 0;
std::set<FakeModule*> g_modules;
std::set<FakeFunction*> g_functions;
std::set<FakeStream*> g_streams;
int g_next_stream = 1;
std::map<std::string, long> g_calls;
std::string g_fail_spec;  // the FAKECUDA_FAIL value the counters belong to

std::string env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

int device_count() { return std::atoi(env("FAKECUDA_DEVICES", "1").c_str()); }

std::pair<int, int> compute_capability(int device) {
  const auto list = split(env("FAKECUDA_CC", "8.0"), ',');
  const std::string& cc = list[std::min<size_t>(static_cast<size_t>(device), list.size() - 1)];
  int major = 0;
  int minor = 0;
  std::sscanf(cc.c_str(), "%d.%d", &major, &minor);
  return {major, minor};
}

size_t memory_bytes() { return std::strtoull(env("FAKECUDA_MEMORY", "17179869184").c_str(), nullptr, 10); }

void log_line(const std::string& line) {
  const std::string path = env("FAKECUDA_LOG", "");
  if (path.empty()) return;
  if (FILE* f = std::fopen(path.c_str(), "a")) {
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

// The injected result for this call, or CUDA_SUCCESS. Counts every call per symbol; the
// counters restart whenever FAKECUDA_FAIL changes.
CUresult injected(const char* symbol) {
  const std::string spec = env("FAKECUDA_FAIL", "");
  if (spec != g_fail_spec) {
    g_fail_spec = spec;
    g_calls.clear();
  }
  const long call = ++g_calls[symbol];
  if (spec.empty()) return CUDA_SUCCESS;
  std::string base = symbol;  // cuMemAlloc_v2 -> cuMemAlloc
  if (const auto v = base.rfind("_v"); v != std::string::npos && v + 2 < base.size() &&
                                       std::all_of(base.begin() + static_cast<long>(v) + 2, base.end(), ::isdigit)) {
    base.resize(v);
  }
  for (const auto& item : split(spec, ',')) {
    std::string name = item;
    long from = 1;
    int code = CUDA_ERROR_UNKNOWN;
    if (const auto at = name.find('@'); at != std::string::npos) {
      from = std::atol(name.c_str() + at + 1);
      name.resize(at);
    }
    if (const auto eq = name.find('='); eq != std::string::npos) {
      code = std::atoi(name.c_str() + eq + 1);
      name.resize(eq);
    }
    if ((name == symbol || name == base) && call >= from) return static_cast<CUresult>(code);
  }
  return CUDA_SUCCESS;
}

// Every entry point starts here: the lock, the injected failure, the init check.
#define FAKE_ENTER(api, needs_init)                                      \
  std::lock_guard<std::recursive_mutex> lock(g_mutex);                   \
  if (CUresult r = injected(FAKE_SYMBOL(api)); r != CUDA_SUCCESS) return r; \
  if ((needs_init) && !g_initialized) return CUDA_ERROR_NOT_INITIALIZED;

#define FAKE_NEEDS_CONTEXT() \
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;

bool valid_device(CUdevice device) { return device >= 0 && device < device_count(); }

bool valid_stream(CUstream stream) {
  return stream == nullptr || g_streams.count(reinterpret_cast<FakeStream*>(stream)) != 0;
}

// Whether [ptr, ptr + bytes) lies inside one allocation.
bool valid_range(CUdeviceptr ptr, size_t bytes) {
  auto it = g_allocations.upper_bound(static_cast<uintptr_t>(ptr));
  if (it == g_allocations.begin()) return false;
  --it;
  const uintptr_t offset = static_cast<uintptr_t>(ptr) - it->first;
  return offset <= it->second && bytes <= it->second - offset;
}

std::string hex(uint64_t value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "0x%llx", static_cast<unsigned long long>(value));
  return buffer;
}

}  // namespace

// Definitions take their C linkage and versioned names from cuda.h's declarations.

CUresult CUDAAPI cuInit(unsigned int flags) {
  FAKE_ENTER(cuInit, false);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  g_initialized = true;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* version) {
  FAKE_ENTER(cuDriverGetVersion, false);
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  FAKE_ENTER(cuDeviceGetCount, true);
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = device_count();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  FAKE_ENTER(cuDeviceGet, true);
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int length, CUdevice device) {
  FAKE_ENTER(cuDeviceGetName, true);
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  const auto [major, minor] = compute_capability(device);
  std::snprintf(name, static_cast<size_t>(length), "Fake CUDA Device %d.%d", major, minor);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  FAKE_ENTER(cuDeviceGetAttribute, true);
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  const auto [major, minor] = compute_capability(device);
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = major; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = minor; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 108; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;  // the plugin asks for nothing else
  }
}

CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice device) {
  FAKE_ENTER(cuDeviceTotalMem, true);
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = memory_bytes();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  FAKE_ENTER(cuDevicePrimaryCtxRetain, true);
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  FakeContext& c = g_contexts[device];
  c.device = device;
  ++c.retains;
  *context = reinterpret_cast<CUcontext>(&c);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice device) {
  FAKE_ENTER(cuDevicePrimaryCtxRelease, true);
  auto it = g_contexts.find(device);
  if (it == g_contexts.end() || it->second.retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --it->second.retains;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext context) {
  FAKE_ENTER(cuCtxSetCurrent, true);
  if (context == nullptr) {
    t_current = nullptr;
    return CUDA_SUCCESS;
  }
  for (auto& [device, c] : g_contexts) {
    if (reinterpret_cast<CUcontext>(&c) == context && c.retains > 0) {
      t_current = &c;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int flags) {
  FAKE_ENTER(cuStreamCreate, true);
  FAKE_NEEDS_CONTEXT();
  if (stream == nullptr || (flags & ~1u) != 0) return CUDA_ERROR_INVALID_VALUE;
  auto* s = new FakeStream{g_next_stream++};
  g_streams.insert(s);
  *stream = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream stream) {
  FAKE_ENTER(cuStreamDestroy, true);
  FAKE_NEEDS_CONTEXT();
  auto* s = reinterpret_cast<FakeStream*>(stream);
  if (g_streams.erase(s) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete s;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
  FAKE_ENTER(cuStreamSynchronize, true);
  FAKE_NEEDS_CONTEXT();
  return valid_stream(stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr* ptr, size_t bytes) {
  FAKE_ENTER(cuMemAlloc, true);
  FAKE_NEEDS_CONTEXT();
  if (ptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > memory_bytes() - std::min(memory_bytes(), g_allocated)) return CUDA_ERROR_OUT_OF_MEMORY;
  // 256-byte alignment, as cuMemAlloc guarantees.
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  g_allocations[reinterpret_cast<uintptr_t>(p)] = bytes;
  g_allocated += bytes;
  *ptr = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr ptr) {
  FAKE_ENTER(cuMemFree, true);
  FAKE_NEEDS_CONTEXT();
  auto it = g_allocations.find(static_cast<uintptr_t>(ptr));
  if (it == g_allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  g_allocated -= it->second;
  std::free(reinterpret_cast<void*>(it->first));
  g_allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  FAKE_ENTER(cuMemcpyHtoDAsync, true);
  FAKE_NEEDS_CONTEXT();
  if (!valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (src == nullptr || !valid_range(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(dst)), src, bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  FAKE_ENTER(cuMemcpyDtoHAsync, true);
  FAKE_NEEDS_CONTEXT();
  if (!valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (dst == nullptr || !valid_range(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(dst, reinterpret_cast<const void*>(static_cast<uintptr_t>(src)), bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  FAKE_ENTER(cuMemcpyDtoDAsync, true);
  FAKE_NEEDS_CONTEXT();
  if (!valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (!valid_range(dst, bytes) || !valid_range(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memmove(reinterpret_cast<void*>(static_cast<uintptr_t>(dst)),
               reinterpret_cast<const void*>(static_cast<uintptr_t>(src)), bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream) {
  FAKE_ENTER(cuMemsetD8Async, true);
  FAKE_NEEDS_CONTEXT();
  if (!valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (!valid_range(dst, count)) return CUDA_ERROR_INVALID_VALUE;
  std::memset(reinterpret_cast<void*>(static_cast<uintptr_t>(dst)), value, count);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  FAKE_ENTER(cuModuleLoadData, true);
  FAKE_NEEDS_CONTEXT();
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* bytes = static_cast<const std::byte*>(image);
  auto m = std::make_unique<FakeModule>();
  std::string line;
  if (metrale::cuda::is_elf({bytes, 4})) {
    const size_t size = metrale::cuda::elf_image_size(bytes);
    if (size == 0) return CUDA_ERROR_INVALID_IMAGE;
    try {
      m->cubin = metrale::cuda::read_cubin({bytes, size});
    } catch (const metrale::cuda::CubinError&) {
      return CUDA_ERROR_INVALID_IMAGE;
    }
    constexpr uint16_t kEmCuda = 190;
    if (m->cubin.machine != kEmCuda) return CUDA_ERROR_INVALID_IMAGE;
    // SASS runs on its own major architecture, same or newer minor.
    const auto [major, minor] = compute_capability(t_current->device);
    if (static_cast<int>(m->cubin.sm / 10) != major || static_cast<int>(m->cubin.sm % 10) > minor) {
      return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    std::string names;
    for (const auto& k : m->cubin.kernels) names += (names.empty() ? "" : ",") + k.name;
    line = "module_load cubin sm=" + std::to_string(m->cubin.sm) + " bytes=" + std::to_string(size) +
           " kernels=" + names;
  } else {
    // PTX: text the driver would JIT; it must at least look like PTX.
    m->ptx = true;
    m->ptx_text = static_cast<const char*>(image);
    if (m->ptx_text.find(".version") == std::string::npos || m->ptx_text.find(".target") == std::string::npos) {
      return CUDA_ERROR_INVALID_IMAGE;
    }
    line = "module_load ptx bytes=" + std::to_string(m->ptx_text.size());
  }
  log_line(line);
  *module = reinterpret_cast<CUmodule>(m.get());
  g_modules.insert(m.release());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  FAKE_ENTER(cuModuleUnload, true);
  FAKE_NEEDS_CONTEXT();
  auto* m = reinterpret_cast<FakeModule*>(module);
  if (g_modules.erase(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  for (auto it = g_functions.begin(); it != g_functions.end();) {
    if ((*it)->module == m) {
      delete *it;
      it = g_functions.erase(it);
    } else {
      ++it;
    }
  }
  delete m;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  FAKE_ENTER(cuModuleGetFunction, true);
  FAKE_NEEDS_CONTEXT();
  auto* m = reinterpret_cast<FakeModule*>(module);
  if (function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (g_modules.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto f = std::make_unique<FakeFunction>();
  f->module = m;
  f->name = name;
  if (m->ptx) {
    if (m->ptx_text.find(".entry " + f->name + "(") == std::string::npos) return CUDA_ERROR_NOT_FOUND;
  } else {
    const auto* kernel = m->cubin.find(name);
    if (kernel == nullptr) return CUDA_ERROR_NOT_FOUND;
    f->params = kernel->params;
  }
  log_line(std::string("function ") + name);
  *function = reinterpret_cast<CUfunction>(f.get());
  g_functions.insert(f.release());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute, int value) {
  FAKE_ENTER(cuFuncSetAttribute, true);
  FAKE_NEEDS_CONTEXT();
  auto* f = reinterpret_cast<FakeFunction*>(function);
  if (g_functions.count(f) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (attribute != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return CUDA_ERROR_INVALID_VALUE;
  if (value < 0 || value > 227 * 1024) return CUDA_ERROR_INVALID_VALUE;  // Hopper's opt-in maximum
  f->max_dynamic_smem = value;
  log_line("func_set_attribute " + f->name + " max_dynamic_smem=" + std::to_string(value));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction function, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                CUstream stream, void** params, void** extra) {
  FAKE_ENTER(cuLaunchKernel, true);
  FAKE_NEEDS_CONTEXT();
  auto* f = reinterpret_cast<FakeFunction*>(function);
  if (g_functions.count(f) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (extra != nullptr) return CUDA_ERROR_INVALID_VALUE;  // the plugin passes kernelParams only
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (gy > 65535 || gz > 65535 || bz > 64 || uint64_t{bx} * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (static_cast<int>(smem) > f->max_dynamic_smem) return CUDA_ERROR_INVALID_VALUE;
  if (!f->params.empty() && params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Read each argument with the size the CUBIN declares, as the driver copies them.
  std::string args;
  for (size_t i = 0; i < f->params.size(); ++i) {
    uint64_t value = 0;
    if (params[i] == nullptr || f->params[i].size > sizeof(value)) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(&value, params[i], f->params[i].size);
    args += i ? "," : "";  // appended in pieces: GCC 12 -O3 reports a false -Wrestrict otherwise
    args += hex(value);
  }
  const uint64_t stream_id = stream ? static_cast<uint64_t>(reinterpret_cast<FakeStream*>(stream)->id) : 0;
  log_line("launch " + f->name + " grid=" + std::to_string(gx) + "," + std::to_string(gy) + "," + std::to_string(gz) +
           " block=" + std::to_string(bx) + "," + std::to_string(by) + "," + std::to_string(bz) +
           " smem=" + std::to_string(smem) + " stream=" + std::to_string(stream_id) + " args=" + args);
  return CUDA_SUCCESS;
}

// NVRTC itself dlopens libcuda.so.1 (finding the fake once it is loaded, by its soname) and
// asks for the driver's private export tables; a driver without them answers "not supported",
// which NVRTC takes in its stride.
CUresult CUDAAPI cuGetExportTable(const void** table, const CUuuid* id) {
  FAKE_ENTER(cuGetExportTable, false);
  if (table == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *table = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
