// SPDX-License-Identifier: MIT OR Apache-2.0
// The C face of the CPU backend: the entry point and the function table. Every function here
// catches everything: no exception crosses the ABI. Instance failures leave their message for
// last_error(); create() and device_count() write theirs into the caller's buffer.
#include "instance.hpp"

#include <metrale/cpu_host_memory.h>
#include <metrale/plugin_glue.h>

#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#ifndef METRALE_CPU_VERSION
#define METRALE_CPU_VERSION "0.0.0"
#endif

struct metrale_backend {
  std::unique_ptr<metrale::cpu::Instance> instance;
};

namespace {

using metrale::cpu::Instance;

constexpr uint32_t kAbiVersion = 1;

void write_error(char* buffer, size_t size, const std::string& message) {
  metrale_glue_write_error(buffer, size, message.c_str());
}

// Runs `call` on the instance, turning every escaping exception into a status and message.
template <class Call>
metrale_status guarded(metrale_backend* backend, const char* what, Call&& call) noexcept {
  if (backend == nullptr || !backend->instance) return METRALE_STATUS_INVALID_ARGUMENT;
  Instance& instance = *backend->instance;
  try {
    return call(instance);
  } catch (const std::bad_alloc&) {
    try {
      return instance.fail(METRALE_STATUS_OUT_OF_MEMORY, std::string(what) + ": out of host memory");
    } catch (...) {
      return METRALE_STATUS_OUT_OF_MEMORY;
    }
  } catch (const std::exception& e) {
    try {
      return instance.fail(METRALE_STATUS_INTERNAL, std::string(what) + ": " + e.what());
    } catch (...) {
      return METRALE_STATUS_INTERNAL;
    }
  } catch (...) {
    try {
      return instance.fail(METRALE_STATUS_INTERNAL, std::string(what) + ": unknown exception");
    } catch (...) {
      return METRALE_STATUS_INTERNAL;
    }
  }
}

metrale_status describe(metrale_plugin_info* out) {
  if (out == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  out->struct_size = sizeof(metrale_plugin_info);
  out->backend_name = "cpu";
  out->version = METRALE_CPU_VERSION;
  out->description = "host CPU backend: scalar, AVX2, AVX-512 and AVX-512 BF16 kernels on a thread pool";
  return METRALE_STATUS_OK;
}

metrale_status device_count(uint32_t* count, char* error, size_t error_size) {
  if (count == nullptr) {
    write_error(error, error_size, "device_count: count is NULL");
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
  *count = 1;  // the host
  return METRALE_STATUS_OK;
}

metrale_status create(const metrale_backend_create_info* info, metrale_backend** out,
                      char* error, size_t error_size) {
  try {
    if (out == nullptr) {
      write_error(error, error_size, "create: out is NULL");
      return METRALE_STATUS_INVALID_ARGUMENT;
    }
    *out = nullptr;
    std::unique_ptr<Instance> instance;
    std::string message;
    const metrale_status status = Instance::create(info, instance, message);
    if (status != METRALE_STATUS_OK) {
      write_error(error, error_size, message);
      return status;
    }
    *out = new metrale_backend{std::move(instance)};
    return METRALE_STATUS_OK;
  } catch (const std::bad_alloc&) {
    write_error(error, error_size, "create: out of host memory");
    return METRALE_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    write_error(error, error_size, std::string("create: ") + e.what());
    return METRALE_STATUS_INTERNAL;
  } catch (...) {
    write_error(error, error_size, "create: unknown exception");
    return METRALE_STATUS_INTERNAL;
  }
}

void destroy(metrale_backend* backend) {
  if (backend == nullptr) return;
  delete backend;  // joins the pool's workers and frees every live allocation
}

const char* last_error(metrale_backend* backend) {
  if (backend == nullptr || !backend->instance) return "last_error: backend is NULL";
  try {
    return backend->instance->last_error();
  } catch (...) {
    return "";
  }
}

metrale_status device_info(metrale_backend* b, metrale_device_info* out) {
  return guarded(b, "device_info", [&](Instance& i) { return i.device_info(out); });
}

metrale_status list_kernels(metrale_backend* b, const metrale_kernel_desc** kernels, size_t* count) {
  return guarded(b, "list_kernels", [&](Instance& i) { return i.list_kernels(kernels, count); });
}

metrale_status get_kernel(metrale_backend* b, const char* module, const char* name, uint64_t* handle) {
  return guarded(b, "get_kernel", [&](Instance& i) { return i.get_kernel(module, name, handle); });
}

metrale_status mem_alloc(metrale_backend* b, size_t bytes, uint64_t* device_ptr) {
  return guarded(b, "mem_alloc", [&](Instance& i) { return i.mem_alloc(bytes, device_ptr); });
}

metrale_status mem_free(metrale_backend* b, uint64_t device_ptr) {
  return guarded(b, "mem_free", [&](Instance& i) { return i.mem_free(device_ptr); });
}

metrale_status copy_to_device(metrale_backend* b, uint64_t dst, const void* src, size_t bytes,
                              uint64_t stream) {
  return guarded(b, "copy_to_device",
                 [&](Instance& i) { return i.copy_to_device(dst, src, bytes, stream); });
}

metrale_status copy_to_host(metrale_backend* b, void* dst, uint64_t src, size_t bytes,
                            uint64_t stream) {
  return guarded(b, "copy_to_host",
                 [&](Instance& i) { return i.copy_to_host(dst, src, bytes, stream); });
}

metrale_status copy_device(metrale_backend* b, uint64_t dst, uint64_t src, size_t bytes,
                           uint64_t stream) {
  return guarded(b, "copy_device",
                 [&](Instance& i) { return i.copy_device(dst, src, bytes, stream); });
}

metrale_status memset_device(metrale_backend* b, uint64_t dst, uint8_t value, size_t bytes,
                             uint64_t stream) {
  return guarded(b, "memset_device",
                 [&](Instance& i) { return i.memset_device(dst, value, bytes, stream); });
}

metrale_status stream_create(metrale_backend* b, uint64_t* stream) {
  return guarded(b, "stream_create", [&](Instance& i) { return i.stream_create(stream); });
}

metrale_status stream_destroy(metrale_backend* b, uint64_t stream) {
  return guarded(b, "stream_destroy", [&](Instance& i) { return i.stream_destroy(stream); });
}

metrale_status stream_synchronize(metrale_backend* b, uint64_t stream) {
  return guarded(b, "stream_synchronize", [&](Instance& i) { return i.stream_synchronize(stream); });
}

metrale_status launch(metrale_backend* b, uint64_t kernel, const metrale_launch_config* config,
                      void* const* args, size_t arg_count) {
  return guarded(b, "launch", [&](Instance& i) { return i.launch(kernel, config, args, arg_count); });
}

metrale_status host_register(metrale_backend* b, const void* host, size_t bytes, uint64_t* device_ptr, uint32_t* registered) {
  return guarded(b, "host_register", [&](Instance& i) { return i.host_register(host, bytes, device_ptr, registered); });
}

metrale_status host_unregister(metrale_backend* b, uint64_t device_ptr) {
  return guarded(b, "host_unregister", [&](Instance& i) { return i.host_unregister(device_ptr); });
}

// The extensions of cpu_host_memory.h; any other name (NULL included) has none.
void* get_proc_address(const char* name) {
  if (name == nullptr) return nullptr;
  const std::string_view wanted(name);
  if (wanted == METRALE_CPU_HOST_REGISTER_NAME)
    return reinterpret_cast<void*>(static_cast<metrale_cpu_host_register_fn>(host_register));
  if (wanted == METRALE_CPU_HOST_UNREGISTER_NAME)
    return reinterpret_cast<void*>(static_cast<metrale_cpu_host_unregister_fn>(host_unregister));
  return nullptr;
}

const metrale_plugin_table kTable = {
    sizeof(metrale_plugin_table),
    kAbiVersion,
    describe,
    device_count,
    create,
    destroy,
    last_error,
    device_info,
    list_kernels,
    get_kernel,
    mem_alloc,
    mem_free,
    copy_to_device,
    copy_to_host,
    copy_device,
    memset_device,
    stream_create,
    stream_destroy,
    stream_synchronize,
    launch,
    get_proc_address,  // the host-memory extension (cpu_host_memory.h)
};

}  // namespace

METRALE_GLUE_DEFINE_ENTRY(kAbiVersion, &kTable)
