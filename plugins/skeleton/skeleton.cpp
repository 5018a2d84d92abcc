// SPDX-License-Identifier: MIT OR Apache-2.0
// The smallest complete metrale backend: copy this directory to start a plugin (README.md has the
// steps). Host memory stands in for device memory and there is one kernel,
// skeleton/fill_u32(out: ptr, value: u32, count: u32), which writes `value` into count u32s.
// Everything a real backend changes is marked "YOUR BACKEND".
//
// The rules every entry point follows (docs/plugin-abi.md): C types only across the boundary;
// no exception escapes (each entry catches and returns a status, the message goes to last_error);
// strings handed out stay valid while the instance lives.
#include <metrale/plugin_abi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

// The opaque instance type the ABI declares; define it however the backend needs.
struct metrale_backend {
  std::string last_error;
  uint64_t next_stream = 1;
};

namespace {

// YOUR BACKEND: the ABI version this file implements (a literal: a newer header must not make the
// plugin claim a table it does not fill).
constexpr uint32_t kAbi = 1;

// YOUR BACKEND: the kernels. Handle i + 1 is kKernels[i]; the manifest must list exactly these.
constexpr metrale_param_type kFillParams[] = {METRALE_PARAM_PTR, METRALE_PARAM_U32, METRALE_PARAM_U32};
constexpr metrale_kernel_desc kKernels[] = {{"skeleton", "fill_u32", kFillParams, 3}};
constexpr size_t kKernelCount = sizeof kKernels / sizeof kKernels[0];

metrale_status fail(metrale_backend* b, metrale_status status, std::string message) {
  b->last_error = std::move(message);
  return status;
}

// Runs `body`, turning any exception into a status and a message: nothing may cross the C ABI.
template <class F>
metrale_status guarded(metrale_backend* b, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(b, METRALE_STATUS_OUT_OF_MEMORY, "skeleton: out of host memory");
  } catch (const std::exception& e) {
    return fail(b, METRALE_STATUS_INTERNAL, std::string("skeleton: ") + e.what());
  } catch (...) {
    return fail(b, METRALE_STATUS_INTERNAL, "skeleton: unknown exception");
  }
}

void* host(uint64_t address) { return reinterpret_cast<void*>(static_cast<uintptr_t>(address)); }

metrale_status describe(metrale_plugin_info* out) {
  out->backend_name = "skeleton";  // must equal the manifest's "backend"
  out->version = "0.1.0";
  out->description = "skeleton backend: host memory, one kernel (plugins/skeleton)";
  return METRALE_STATUS_OK;
}

metrale_status device_count(uint32_t* count, char*, size_t) {
  *count = 1;  // YOUR BACKEND: 0 when no device is present (not an error)
  return METRALE_STATUS_OK;
}

metrale_status create(const metrale_backend_create_info* info, metrale_backend** out, char* error,
                      size_t error_size) noexcept {
  if (info->device_index != 0) {
    std::snprintf(error, error_size, "skeleton backend has one device (index 0); asked for index %u", info->device_index);
    return METRALE_STATUS_NOT_FOUND;
  }
  // YOUR BACKEND: open the driver here; UNAVAILABLE (with a message) when this machine cannot run it.
  auto* b = new (std::nothrow) metrale_backend;
  if (!b) {
    std::snprintf(error, error_size, "skeleton backend: out of host memory creating the instance");
    return METRALE_STATUS_OUT_OF_MEMORY;
  }
  *out = b;
  return METRALE_STATUS_OK;
}

void destroy(metrale_backend* b) { delete b; }
const char* last_error(metrale_backend* b) { return b ? b->last_error.c_str() : ""; }

metrale_status device_info(metrale_backend*, metrale_device_info* out) {
  out->name = "skeleton host device";
  out->target = "skeleton-host";  // YOUR BACKEND: the target manifests gate kernels on
  out->memory_bytes = 0;
  out->compute_units = 1;
  return METRALE_STATUS_OK;
}

metrale_status list_kernels(metrale_backend*, const metrale_kernel_desc** kernels, size_t* count) {
  *kernels = kKernels;
  *count = kKernelCount;
  return METRALE_STATUS_OK;
}

metrale_status get_kernel(metrale_backend* b, const char* module, const char* name, uint64_t* handle) {
  return guarded(b, [&] {
    for (size_t i = 0; i < kKernelCount; ++i) {
      if (std::strcmp(module, kKernels[i].module) == 0 && std::strcmp(name, kKernels[i].name) == 0) {
        *handle = i + 1;
        return METRALE_STATUS_OK;
      }
    }
    return fail(b, METRALE_STATUS_NOT_FOUND,
                std::string("skeleton backend has no kernel ") + module + "/" + name + " (it has skeleton/fill_u32)");
  });
}

metrale_status mem_alloc(metrale_backend* b, size_t bytes, uint64_t* ptr) {
  void* block = std::malloc(bytes ? bytes : 1);
  if (!block) return fail(b, METRALE_STATUS_OUT_OF_MEMORY, "skeleton: cannot allocate " + std::to_string(bytes) + " bytes");
  *ptr = reinterpret_cast<uintptr_t>(block);
  return METRALE_STATUS_OK;
}
metrale_status mem_free(metrale_backend*, uint64_t ptr) {
  std::free(host(ptr));
  return METRALE_STATUS_OK;
}
// Every call completes before it returns, so streams are only names.
metrale_status copy_to_device(metrale_backend*, uint64_t dst, const void* src, size_t n, uint64_t) {
  std::memcpy(host(dst), src, n);
  return METRALE_STATUS_OK;
}
metrale_status copy_to_host(metrale_backend*, void* dst, uint64_t src, size_t n, uint64_t) {
  std::memcpy(dst, host(src), n);
  return METRALE_STATUS_OK;
}
metrale_status copy_device(metrale_backend*, uint64_t dst, uint64_t src, size_t n, uint64_t) {
  std::memmove(host(dst), host(src), n);
  return METRALE_STATUS_OK;
}
metrale_status memset_device(metrale_backend*, uint64_t dst, uint8_t value, size_t n, uint64_t) {
  std::memset(host(dst), value, n);
  return METRALE_STATUS_OK;
}
metrale_status stream_create(metrale_backend* b, uint64_t* stream) {
  *stream = b->next_stream++;
  return METRALE_STATUS_OK;
}
metrale_status stream_destroy(metrale_backend*, uint64_t) { return METRALE_STATUS_OK; }
metrale_status stream_synchronize(metrale_backend*, uint64_t) { return METRALE_STATUS_OK; }

metrale_status launch(metrale_backend* b, uint64_t kernel, const metrale_launch_config*, void* const* args,
                      size_t arg_count) {
  return guarded(b, [&] {
    if (kernel == 0 || kernel > kKernelCount) return fail(b, METRALE_STATUS_NOT_FOUND, "skeleton: unknown kernel handle " + std::to_string(kernel));
    const metrale_kernel_desc& d = kKernels[kernel - 1];
    if (arg_count != d.param_count) {
      return fail(b, METRALE_STATUS_INVALID_ARGUMENT, std::string("skeleton: ") + d.module + "/" + d.name + " takes " +
                                                          std::to_string(d.param_count) + " arguments, got " +
                                                          std::to_string(arg_count));
    }
    // YOUR BACKEND: dispatch on the handle; args[i] points at parameter i's value.
    auto* out = static_cast<uint32_t*>(host(*static_cast<const uint64_t*>(args[0])));
    const uint32_t value = *static_cast<const uint32_t*>(args[1]);
    const uint32_t count = *static_cast<const uint32_t*>(args[2]);
    for (uint32_t i = 0; i < count; ++i) out[i] = value;
    return METRALE_STATUS_OK;
  });
}

constexpr metrale_plugin_table kTable{
    sizeof(metrale_plugin_table), kAbi, describe, device_count, create, destroy, last_error, device_info,
    list_kernels, get_kernel, mem_alloc, mem_free, copy_to_device, copy_to_host, copy_device, memset_device,
    stream_create, stream_destroy, stream_synchronize, launch,
    nullptr};  // get_proc_address: YOUR BACKEND may offer extensions by name (docs/plugin-abi.md)

}  // namespace

// The one exported symbol: the version handshake (docs/plugin-abi.md).
extern "C" METRALE_PLUGIN_EXPORT metrale_status metrale_plugin_entry(uint32_t runtime_min, uint32_t runtime_max,
                                                                     uint32_t* chosen, const metrale_plugin_table** table) {
  *chosen = kAbi;
  if (runtime_min > kAbi || runtime_max < kAbi) return METRALE_STATUS_INCOMPATIBLE;
  *table = &kTable;
  return METRALE_STATUS_OK;
}
