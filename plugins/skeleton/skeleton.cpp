// SPDX-License-Identifier: MIT OR Apache-2.0
// The smallest complete metrale backend: copy this directory to start a plugin (README.md has the
// steps). Host memory stands in for device memory and there is one kernel,
// skeleton/fill_u32(out: ptr, value: u32, count: u32), which writes `value` into count u32s.
// Everything a real backend changes is marked "YOUR BACKEND".
//
// The rules every entry point follows (docs/plugin-abi.md): C types only across the boundary;
// no exception escapes (each entry that can throw runs inside metrale_glue_guard, which answers a
// status and leaves the message for last_error); strings handed out stay valid while the
// instance lives. plugin_glue.h carries the boilerplate; the plugin conformance suite (tests/plugin_cts)
// checks the contract.
#include <metrale/plugin_glue.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

// The opaque instance type the ABI declares; define it however the backend needs.
struct metrale_backend {
  metrale_glue_error_slot error;
  metrale_glue_table allocations;  // live host blocks: (address, bytes)
  metrale_glue_table streams;      // live stream ids: (id, 1)
};

namespace {

// YOUR BACKEND: the ABI version this file implements (a literal: a newer header must not make the
// plugin claim a table it does not fill).
constexpr uint32_t kAbi = 1;

// YOUR BACKEND: the kernels. Handle i + 1 is kKernels[i]; the manifest must list exactly these.
constexpr metrale_param_type kFillParams[] = {METRALE_PARAM_PTR, METRALE_PARAM_U32, METRALE_PARAM_U32};
constexpr metrale_kernel_desc kKernels[] = {{"skeleton", "fill_u32", kFillParams, 3}};
constexpr size_t kKernelCount = sizeof kKernels / sizeof kKernels[0];

void* host(uint64_t address) { return reinterpret_cast<void*>(static_cast<uintptr_t>(address)); }

metrale_status describe(metrale_plugin_info* out) {
  if (out == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  out->backend_name = "skeleton";  // must equal the manifest's "backend"
  out->version = "0.1.0";
  out->description = "skeleton backend: host memory, one kernel (plugins/skeleton)";
  return METRALE_STATUS_OK;
}

metrale_status device_count(uint32_t* count, char* error, size_t error_size) {
  if (count == nullptr) {
    metrale_glue_write_error(error, error_size, "skeleton: device_count: count is NULL");
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
  *count = 1;  // YOUR BACKEND: 0 when no device is present (not an error)
  return METRALE_STATUS_OK;
}

metrale_status create(const metrale_backend_create_info* info, metrale_backend** out, char* error,
                      size_t error_size) {
  if (out != nullptr) *out = nullptr;
  if (out == nullptr || info == nullptr || info->host == nullptr || info->host->log == nullptr) {
    metrale_glue_write_error(error, error_size, "skeleton: create needs create_info, host callbacks with log, and out");
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
  if (info->device_index != 0) {
    metrale_glue_format_error(error, error_size, "skeleton backend has one device (index 0); asked for index %u",
                              info->device_index);
    return METRALE_STATUS_NOT_FOUND;
  }
  // YOUR BACKEND: read your options here; unknown ones are logged and ignored.
  for (uint32_t i = 0; i < info->option_count && info->options != nullptr; ++i) {
    const metrale_option& option = info->options[i];
    if (option.key == nullptr || option.value == nullptr) {
      metrale_glue_format_error(error, error_size, "skeleton: option %u has a NULL key or value", i);
      return METRALE_STATUS_INVALID_ARGUMENT;
    }
    char line[256];
    std::snprintf(line, sizeof line, "skeleton: ignoring unknown option %s=%s", option.key, option.value);
    info->host->log(info->host->user, METRALE_LOG_WARN, line);
  }
  // YOUR BACKEND: open the driver here; UNAVAILABLE (with a message) when this machine cannot run it.
  auto* b = new (std::nothrow) metrale_backend;
  if (b == nullptr) {
    metrale_glue_write_error(error, error_size, "skeleton backend: out of host memory creating the instance");
    return METRALE_STATUS_OUT_OF_MEMORY;
  }
  metrale_glue_error_init(&b->error);
  metrale_glue_table_init(&b->allocations);
  metrale_glue_table_init(&b->streams);
  *out = b;
  return METRALE_STATUS_OK;
}

void destroy(metrale_backend* b) {
  if (b == nullptr) return;
  for (size_t i = 0; i < b->allocations.count; ++i) std::free(host(b->allocations.items[i].start));
  metrale_glue_table_destroy(&b->allocations);
  metrale_glue_table_destroy(&b->streams);
  delete b;
}

const char* last_error(metrale_backend* b) { return b ? metrale_glue_last_error(&b->error) : ""; }

metrale_status device_info(metrale_backend* b, metrale_device_info* out) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  if (out == nullptr) return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "skeleton: device_info: out is NULL");
  out->name = "skeleton host device";
  out->target = "skeleton-host";  // YOUR BACKEND: the target manifests gate kernels on
  out->memory_bytes = 0;
  out->compute_units = 1;
  return METRALE_STATUS_OK;
}

metrale_status list_kernels(metrale_backend* b, const metrale_kernel_desc** kernels, size_t* count) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  if (kernels == nullptr || count == nullptr)
    return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "skeleton: list_kernels: NULL out-pointer");
  *kernels = kKernels;
  *count = kKernelCount;
  return METRALE_STATUS_OK;
}

metrale_status get_kernel(metrale_backend* b, const char* module, const char* name, uint64_t* handle) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  if (module == nullptr || name == nullptr || handle == nullptr)
    return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "skeleton: get_kernel: NULL argument");
  *handle = 0;
  for (size_t i = 0; i < kKernelCount; ++i) {
    if (std::strcmp(module, kKernels[i].module) == 0 && std::strcmp(name, kKernels[i].name) == 0) {
      *handle = i + 1;
      return METRALE_STATUS_OK;
    }
  }
  return metrale_glue_fail(&b->error, METRALE_STATUS_NOT_FOUND,
                           "skeleton backend has no kernel %s/%s (it has skeleton/fill_u32)", module, name);
}

metrale_status mem_alloc(metrale_backend* b, size_t bytes, uint64_t* ptr) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  if (ptr == nullptr) return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "skeleton: mem_alloc: ptr is NULL");
  *ptr = 0;
  void* block = std::malloc(bytes ? bytes : 1);  // a zero-byte request still gets a distinct address
  if (block == nullptr || !metrale_glue_table_add(&b->allocations, reinterpret_cast<uintptr_t>(block), bytes)) {
    std::free(block);
    return metrale_glue_fail(&b->error, METRALE_STATUS_OUT_OF_MEMORY, "skeleton: cannot allocate %zu bytes", bytes);
  }
  *ptr = reinterpret_cast<uintptr_t>(block);
  return METRALE_STATUS_OK;
}

metrale_status mem_free(metrale_backend* b, uint64_t ptr) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  if (ptr == 0) return METRALE_STATUS_OK;  // like free(NULL)
  if (!metrale_glue_table_remove(&b->allocations, ptr))
    return metrale_glue_fail(&b->error, METRALE_STATUS_NOT_FOUND,
                             "skeleton: mem_free: 0x%llx is not a live allocation of this instance",
                             static_cast<unsigned long long>(ptr));
  std::free(host(ptr));
  return METRALE_STATUS_OK;
}

// The checks every copy makes: the stream exists, and the device range lies in one allocation.
metrale_status check_copy(metrale_backend* b, const char* what, uint64_t address, size_t bytes, uint64_t stream) {
  if (stream != 0 && !metrale_glue_table_covers(&b->streams, stream, 1))
    return metrale_glue_fail(&b->error, METRALE_STATUS_NOT_FOUND, "skeleton: %s: no stream %llu on this instance",
                             what, static_cast<unsigned long long>(stream));
  if (bytes != 0 && !metrale_glue_table_covers(&b->allocations, address, bytes))
    return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT,
                             "skeleton: %s: [0x%llx, +%zu bytes) is not inside a live allocation", what,
                             static_cast<unsigned long long>(address), bytes);
  return METRALE_STATUS_OK;
}

// Every call completes before it returns, so a stream is only a name.
metrale_status copy_to_device(metrale_backend* b, uint64_t dst, const void* src, size_t n, uint64_t stream) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  if (metrale_status s = check_copy(b, "copy_to_device", dst, n, stream); s != METRALE_STATUS_OK) return s;
  if (n != 0 && src == nullptr) return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "skeleton: copy_to_device: src is NULL");
  if (n != 0) std::memcpy(host(dst), src, n);
  return METRALE_STATUS_OK;
}
metrale_status copy_to_host(metrale_backend* b, void* dst, uint64_t src, size_t n, uint64_t stream) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  if (metrale_status s = check_copy(b, "copy_to_host", src, n, stream); s != METRALE_STATUS_OK) return s;
  if (n != 0 && dst == nullptr) return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "skeleton: copy_to_host: dst is NULL");
  if (n != 0) std::memcpy(dst, host(src), n);
  return METRALE_STATUS_OK;
}
metrale_status copy_device(metrale_backend* b, uint64_t dst, uint64_t src, size_t n, uint64_t stream) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  if (metrale_status s = check_copy(b, "copy_device destination", dst, n, stream); s != METRALE_STATUS_OK) return s;
  if (metrale_status s = check_copy(b, "copy_device source", src, n, stream); s != METRALE_STATUS_OK) return s;
  if (n != 0) std::memmove(host(dst), host(src), n);
  return METRALE_STATUS_OK;
}
metrale_status memset_device(metrale_backend* b, uint64_t dst, uint8_t value, size_t n, uint64_t stream) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  if (metrale_status s = check_copy(b, "memset_device", dst, n, stream); s != METRALE_STATUS_OK) return s;
  if (n != 0) std::memset(host(dst), value, n);
  return METRALE_STATUS_OK;
}

metrale_status stream_create(metrale_backend* b, uint64_t* stream) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  if (stream == nullptr) return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "skeleton: stream_create: stream is NULL");
  const uint64_t id = metrale_glue_table_new_id(&b->streams);
  if (!metrale_glue_table_add(&b->streams, id, 1))
    return metrale_glue_fail(&b->error, METRALE_STATUS_OUT_OF_MEMORY, "skeleton: stream_create: out of host memory");
  *stream = id;
  return METRALE_STATUS_OK;
}
metrale_status stream_destroy(metrale_backend* b, uint64_t stream) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  if (stream == 0)
    return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "skeleton: the default stream 0 is never destroyed");
  if (!metrale_glue_table_remove(&b->streams, stream))
    return metrale_glue_fail(&b->error, METRALE_STATUS_NOT_FOUND, "skeleton: stream_destroy: no stream %llu on this instance",
                             static_cast<unsigned long long>(stream));
  return METRALE_STATUS_OK;
}
metrale_status stream_synchronize(metrale_backend* b, uint64_t stream) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  return check_copy(b, "stream_synchronize", 0, 0, stream);
}

metrale_status launch(metrale_backend* b, uint64_t kernel, const metrale_launch_config* config, void* const* args,
                      size_t arg_count) {
  if (b == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  return metrale_glue_guard(&b->error, "skeleton: launch", [&] {
    if (kernel == 0 || kernel > kKernelCount)
      return metrale_glue_fail(&b->error, METRALE_STATUS_NOT_FOUND, "skeleton: launch: unknown kernel handle %llu",
                               static_cast<unsigned long long>(kernel));
    const metrale_kernel_desc& d = kKernels[kernel - 1];
    char why[256];
    if (metrale_glue_check_launch(config, args, arg_count, d.param_count, why, sizeof why) != METRALE_STATUS_OK)
      return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "skeleton: launch %s/%s: %s", d.module, d.name, why);
    if (metrale_status s = check_copy(b, "launch", 0, 0, config->stream); s != METRALE_STATUS_OK) return s;
    // YOUR BACKEND: dispatch on the handle; args[i] points at parameter i's value. Check what the
    // kernel will touch before touching it.
    const uint64_t out = *static_cast<const uint64_t*>(args[0]);
    const uint32_t value = *static_cast<const uint32_t*>(args[1]);
    const uint32_t count = *static_cast<const uint32_t*>(args[2]);
    if (count != 0 && !metrale_glue_table_covers(&b->allocations, out, uint64_t{count} * 4))
      return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT,
                               "skeleton: launch skeleton/fill_u32: 'out' must hold count = %u u32s", count);
    auto* words = static_cast<uint32_t*>(host(out));
    for (uint32_t i = 0; i < count; ++i) words[i] = value;
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
METRALE_GLUE_DEFINE_ENTRY(kAbi, &kTable)
