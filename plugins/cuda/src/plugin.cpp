// SPDX-License-Identifier: MIT OR Apache-2.0
// The C entry points: the ABI handshake and the function table, whose get_proc_address offers
// the compile extension of cuda_compile.h. Nothing thrown inside crosses them: each catches
// everything and answers a status, with the message in last_error (instance calls) or the
// caller's error buffer.
#include "compile_api.hpp"
#include "instance.hpp"

#include <metrale/plugin_glue.h>

#include <cstring>
#include <map>
#include <mutex>
#include <new>

#ifndef METRALE_CUDA_PLUGIN_VERSION
#define METRALE_CUDA_PLUGIN_VERSION "0.0.0"
#endif

namespace {

using metrale::cuda::Instance;
using metrale::cuda::PluginError;

void write_error(char* error, size_t error_size, const std::string& message) noexcept {
  metrale_glue_write_error(error, error_size, message.c_str());
}

// Runs `body`, mapping what it throws to a status; `report` receives the message.
template <class Body, class Report>
metrale_status guarded(Body&& body, Report&& report) noexcept {
  try {
    body();
    return METRALE_STATUS_OK;
  } catch (const PluginError& e) {
    report(std::string(e.what()));
    return e.status();
  } catch (const std::bad_alloc&) {
    report(std::string("out of host memory"));
    return METRALE_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    report(std::string("internal error: ") + e.what());
    return METRALE_STATUS_INTERNAL;
  } catch (...) {
    report(std::string("internal error: unknown exception"));
    return METRALE_STATUS_INTERNAL;
  }
}

template <class Body>
metrale_status on_instance(metrale_backend* backend, Body&& body) noexcept {
  if (backend == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  return guarded(std::forward<Body>(body), [backend](std::string message) noexcept {
    try {
      backend->set_last_error(std::move(message));
    } catch (...) {
      // Out of memory while recording the message: the status alone must do.
    }
  });
}

metrale_status describe(metrale_plugin_info* out) {
  if (out == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  out->struct_size = sizeof(metrale_plugin_info);
  out->backend_name = "cuda";
  out->version = METRALE_CUDA_PLUGIN_VERSION;
  out->description = "NVIDIA GPUs through the CUDA driver API, kernels compiled at run time by NVRTC";
  return METRALE_STATUS_OK;
}

metrale_status device_count(uint32_t* count, char* error, size_t error_size) {
  if (count == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  *count = 0;
  return guarded(
      [&] {
        // The default driver: options reach only create(), so an operator's "driver" override
        // does not apply here.
        const auto driver = metrale::cuda::Driver::load(metrale::cuda::kDefaultDriver);
        int n = 0;
        metrale::cuda::Driver::check(driver->cuDeviceGetCount(&n), METRALE_CU_SYMBOL(cuDeviceGetCount));
        if (n <= 0) throw PluginError(METRALE_STATUS_UNAVAILABLE, "the CUDA driver reports no device");
        *count = static_cast<uint32_t>(n);
      },
      [&](const std::string& message) { write_error(error, error_size, message); });
}

metrale_status create(const metrale_backend_create_info* info, metrale_backend** out, char* error, size_t error_size) {
  if (out == nullptr) return METRALE_STATUS_INVALID_ARGUMENT;
  *out = nullptr;
  return guarded(
      [&] {
        if (info == nullptr || info->struct_size < sizeof(metrale_backend_create_info)) {
          throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "create: missing or short metrale_backend_create_info");
        }
        if (info->host == nullptr || info->host->log == nullptr) {
          throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "create: host callbacks with a log function are required");
        }
        *out = new metrale_backend(*info);
      },
      [&](const std::string& message) { write_error(error, error_size, message); });
}

void destroy(metrale_backend* backend) {
  try {
    delete backend;
  } catch (...) {
    // The destructor does not throw; nothing may escape in any case.
  }
}

const char* last_error(metrale_backend* backend) {
  if (backend == nullptr) return "";
  try {
    return backend->last_error();
  } catch (...) {
    return "";
  }
}

metrale_status device_info(metrale_backend* b, metrale_device_info* out) {
  return on_instance(b, [&] { b->device_info(out); });
}
metrale_status list_kernels(metrale_backend* b, const metrale_kernel_desc** kernels, size_t* count) {
  return on_instance(b, [&] { b->list_kernels(kernels, count); });
}
metrale_status get_kernel(metrale_backend* b, const char* module, const char* name, uint64_t* handle) {
  return on_instance(b, [&] {
    if (handle == nullptr) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "get_kernel: null handle output");
    *handle = 0;
    *handle = b->get_kernel(module, name);
  });
}
metrale_status mem_alloc(metrale_backend* b, size_t bytes, uint64_t* ptr) {
  return on_instance(b, [&] {
    if (ptr == nullptr) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "mem_alloc: null output");
    *ptr = 0;
    *ptr = b->mem_alloc(bytes);
  });
}
metrale_status mem_free(metrale_backend* b, uint64_t ptr) {
  return on_instance(b, [&] { b->mem_free(ptr); });
}
metrale_status copy_to_device(metrale_backend* b, uint64_t dst, const void* src, size_t bytes, uint64_t stream) {
  return on_instance(b, [&] { b->copy_to_device(dst, src, bytes, stream); });
}
metrale_status copy_to_host(metrale_backend* b, void* dst, uint64_t src, size_t bytes, uint64_t stream) {
  return on_instance(b, [&] { b->copy_to_host(dst, src, bytes, stream); });
}
metrale_status copy_device(metrale_backend* b, uint64_t dst, uint64_t src, size_t bytes, uint64_t stream) {
  return on_instance(b, [&] { b->copy_device(dst, src, bytes, stream); });
}
metrale_status memset_device(metrale_backend* b, uint64_t dst, uint8_t value, size_t bytes, uint64_t stream) {
  return on_instance(b, [&] { b->memset_device(dst, value, bytes, stream); });
}
metrale_status stream_create(metrale_backend* b, uint64_t* stream) {
  return on_instance(b, [&] {
    if (stream == nullptr) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "stream_create: null output");
    *stream = b->stream_create();
  });
}
metrale_status stream_destroy(metrale_backend* b, uint64_t stream) {
  return on_instance(b, [&] { b->stream_destroy(stream); });
}
metrale_status stream_synchronize(metrale_backend* b, uint64_t stream) {
  return on_instance(b, [&] { b->stream_synchronize(stream); });
}
metrale_status launch(metrale_backend* b, uint64_t kernel, const metrale_launch_config* config, void* const* args,
                      size_t arg_count) {
  return on_instance(b, [&] { b->launch(kernel, config, args, arg_count); });
}

void* get_proc_address(const char* name) { return metrale::cuda::compile_extension(name); }

const metrale_plugin_table kTable = {
    sizeof(metrale_plugin_table),
    1,
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
    get_proc_address,
};

}  // namespace

// This plugin speaks ABI 1 only.
METRALE_GLUE_DEFINE_ENTRY(1, &kTable)

static_assert(std::is_same_v<decltype(&metrale_plugin_entry), metrale_plugin_entry_fn>,
              "the entry point must have the ABI's type");
