/* SPDX-License-Identifier: MIT OR Apache-2.0
 * An out-of-tree backend in plain C: host memory, one kernel (blas/saxpy: y = a*x + y).
 * Built against the installed <metrale/plugin_abi.h> only. */
#include <metrale/plugin_abi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct metrale_backend {
  char last_error[256];
  uint64_t next_stream;
};

static const metrale_param_type kSaxpyParams[] = {METRALE_PARAM_F32, METRALE_PARAM_PTR, METRALE_PARAM_PTR,
                                                  METRALE_PARAM_U32};
static const metrale_kernel_desc kKernels[] = {{"blas", "saxpy", kSaxpyParams, 4}};

static metrale_status fail(metrale_backend* b, metrale_status status, const char* message) {
  snprintf(b->last_error, sizeof b->last_error, "%s", message);
  return status;
}

static metrale_status describe(metrale_plugin_info* out) {
  out->backend_name = "vendor";
  out->version = "1.0";
  out->description = "out-of-tree test backend (plain C)";
  return METRALE_STATUS_OK;
}

static metrale_status device_count(uint32_t* count, char* error, size_t size) {
  (void)error, (void)size;
  *count = 1;
  return METRALE_STATUS_OK;
}

static metrale_status create(const metrale_backend_create_info* info, metrale_backend** out, char* error,
                             size_t size) {
  if (info->device_index != 0) {
    snprintf(error, size, "vendor backend has one device; asked for %u", info->device_index);
    return METRALE_STATUS_NOT_FOUND;
  }
  metrale_backend* b = calloc(1, sizeof *b);
  if (!b) return METRALE_STATUS_OUT_OF_MEMORY;
  b->next_stream = 1;
  *out = b;
  return METRALE_STATUS_OK;
}

static void destroy(metrale_backend* b) { free(b); }
static const char* last_error(metrale_backend* b) { return b ? b->last_error : ""; }

static metrale_status device_info(metrale_backend* b, metrale_device_info* out) {
  (void)b;
  out->name = "vendor host device";
  out->target = "vendor-host";
  out->memory_bytes = 0;
  out->compute_units = 1;
  return METRALE_STATUS_OK;
}

static metrale_status list_kernels(metrale_backend* b, const metrale_kernel_desc** kernels, size_t* count) {
  (void)b;
  *kernels = kKernels;
  *count = 1;
  return METRALE_STATUS_OK;
}

static metrale_status get_kernel(metrale_backend* b, const char* module, const char* name, uint64_t* handle) {
  if (strcmp(module, "blas") == 0 && strcmp(name, "saxpy") == 0) {
    *handle = 1;
    return METRALE_STATUS_OK;
  }
  return fail(b, METRALE_STATUS_NOT_FOUND, "vendor backend provides only blas/saxpy");
}

static metrale_status mem_alloc(metrale_backend* b, size_t bytes, uint64_t* ptr) {
  void* block = malloc(bytes ? bytes : 1);
  if (!block) return fail(b, METRALE_STATUS_OUT_OF_MEMORY, "malloc failed");
  *ptr = (uint64_t)(uintptr_t)block;
  return METRALE_STATUS_OK;
}
static metrale_status mem_free(metrale_backend* b, uint64_t ptr) {
  (void)b;
  free((void*)(uintptr_t)ptr);
  return METRALE_STATUS_OK;
}
static metrale_status copy_to_device(metrale_backend* b, uint64_t dst, const void* src, size_t n, uint64_t s) {
  (void)b, (void)s;
  memcpy((void*)(uintptr_t)dst, src, n);
  return METRALE_STATUS_OK;
}
static metrale_status copy_to_host(metrale_backend* b, void* dst, uint64_t src, size_t n, uint64_t s) {
  (void)b, (void)s;
  memcpy(dst, (const void*)(uintptr_t)src, n);
  return METRALE_STATUS_OK;
}
static metrale_status copy_device(metrale_backend* b, uint64_t dst, uint64_t src, size_t n, uint64_t s) {
  (void)b, (void)s;
  memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n);
  return METRALE_STATUS_OK;
}
static metrale_status memset_device(metrale_backend* b, uint64_t dst, uint8_t v, size_t n, uint64_t s) {
  (void)b, (void)s;
  memset((void*)(uintptr_t)dst, v, n);
  return METRALE_STATUS_OK;
}
static metrale_status stream_create(metrale_backend* b, uint64_t* stream) {
  *stream = b->next_stream++;
  return METRALE_STATUS_OK;
}
static metrale_status stream_destroy(metrale_backend* b, uint64_t s) {
  (void)b, (void)s;
  return METRALE_STATUS_OK;
}
static metrale_status stream_synchronize(metrale_backend* b, uint64_t s) {
  (void)b, (void)s;
  return METRALE_STATUS_OK;
}

static metrale_status launch(metrale_backend* b, uint64_t kernel, const metrale_launch_config* config,
                             void* const* args, size_t arg_count) {
  (void)config;
  if (kernel != 1) return fail(b, METRALE_STATUS_NOT_FOUND, "unknown kernel handle");
  if (arg_count != 4) return fail(b, METRALE_STATUS_INVALID_ARGUMENT, "saxpy takes 4 arguments");
  float a = *(const float*)args[0];
  const float* x = (const float*)(uintptr_t)(*(const uint64_t*)args[1]);
  float* y = (float*)(uintptr_t)(*(const uint64_t*)args[2]);
  uint32_t n = *(const uint32_t*)args[3];
  for (uint32_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
  return METRALE_STATUS_OK;
}

static const metrale_plugin_table kTable = {
    sizeof(metrale_plugin_table), 1, describe, device_count, create, destroy, last_error, device_info,
    list_kernels, get_kernel, mem_alloc, mem_free, copy_to_device, copy_to_host, copy_device, memset_device,
    stream_create, stream_destroy, stream_synchronize, launch};

METRALE_PLUGIN_EXPORT metrale_status metrale_plugin_entry(uint32_t runtime_min, uint32_t runtime_max,
                                                          uint32_t* chosen, const metrale_plugin_table** table) {
  *chosen = 1;
  if (runtime_min > 1 || runtime_max < 1) return METRALE_STATUS_INCOMPATIBLE;
  *table = &kTable;
  return METRALE_STATUS_OK;
}
