/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* The minimal metrale plugin, in plain C (docs/plugin-abi.md): host memory as device memory and
 * one kernel, minimal/scale_f32(data: ptr, factor: f32, count: u32), data[i] *= factor. It meets
 * the whole ABI contract (tests/plugin_cts checks it) with plugin_glue.h doing the bookkeeping. */
#include <metrale/plugin_glue.h>

struct metrale_backend {
  metrale_glue_error_slot error; /* last_error() */
  metrale_glue_table memory;     /* live allocations: (address, bytes) */
  metrale_glue_table streams;    /* live streams: (id, 1) */
};

static const metrale_param_type kScaleParams[] = {METRALE_PARAM_PTR, METRALE_PARAM_F32, METRALE_PARAM_U32};
static const metrale_kernel_desc kKernels[] = {{"minimal", "scale_f32", kScaleParams, 3}}; /* handle 1 */

#define HOST(address) ((void*)(uintptr_t)(address))
#define FAIL(b, status, ...) metrale_glue_fail(&(b)->error, (status), __VA_ARGS__)
/* A malformed call: the status, and the message too when there is an instance to keep it. */
#define REFUSE(b, ...) ((b) ? FAIL(b, METRALE_STATUS_INVALID_ARGUMENT, __VA_ARGS__) : METRALE_STATUS_INVALID_ARGUMENT)

static metrale_status describe(metrale_plugin_info* out) {
  if (!out) return METRALE_STATUS_INVALID_ARGUMENT;
  out->backend_name = "minimal"; /* the manifest's "backend" */
  out->version = "1.0.0";
  out->description = "the minimal plain-C plugin of docs/plugin-abi.md";
  return METRALE_STATUS_OK;
}

static metrale_status device_count(uint32_t* count, char* error, size_t size) {
  if (!count) {
    metrale_glue_write_error(error, size, "count is NULL");
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
  *count = 1;
  return METRALE_STATUS_OK;
}

static metrale_status create(const metrale_backend_create_info* info, metrale_backend** out, char* error,
                             size_t size) {
  metrale_backend* b;
  uint32_t i;
  if (out) *out = NULL;
  if (!out || !info || !info->host || !info->host->log) {
    metrale_glue_write_error(error, size, "create needs info, host->log and out");
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
  if (info->device_index != 0) {
    metrale_glue_format_error(error, size, "minimal has one device (index 0), not %u", info->device_index);
    return METRALE_STATUS_NOT_FOUND;
  }
  for (i = 0; i < info->option_count && info->options; ++i) { /* it has no options: each one is unknown */
    if (!info->options[i].key || !info->options[i].value) {
      metrale_glue_format_error(error, size, "option %u has a NULL key or value", i);
      return METRALE_STATUS_INVALID_ARGUMENT;
    }
    info->host->log(info->host->user, METRALE_LOG_WARN, info->options[i].key);
  }
  if (!(b = calloc(1, sizeof *b))) {
    metrale_glue_write_error(error, size, "out of memory");
    return METRALE_STATUS_OUT_OF_MEMORY;
  }
  metrale_glue_error_init(&b->error);
  metrale_glue_table_init(&b->memory);
  metrale_glue_table_init(&b->streams);
  *out = b;
  return METRALE_STATUS_OK;
}

static void destroy(metrale_backend* b) {
  size_t i;
  if (!b) return;
  for (i = 0; i < b->memory.count; ++i) free(HOST(b->memory.items[i].start));
  metrale_glue_table_destroy(&b->memory);
  metrale_glue_table_destroy(&b->streams);
  free(b);
}

static const char* last_error(metrale_backend* b) { return b ? metrale_glue_last_error(&b->error) : ""; }

static metrale_status device_info(metrale_backend* b, metrale_device_info* out) {
  if (!b || !out) return REFUSE(b, "device_info: out is NULL");
  out->name = "minimal host device";
  out->target = "minimal-host";
  out->memory_bytes = 0;
  out->compute_units = 1;
  return METRALE_STATUS_OK;
}

static metrale_status list_kernels(metrale_backend* b, const metrale_kernel_desc** kernels, size_t* count) {
  if (!b || !kernels || !count) return REFUSE(b, "list_kernels: NULL out-pointer");
  *kernels = kKernels;
  *count = 1;
  return METRALE_STATUS_OK;
}

static metrale_status get_kernel(metrale_backend* b, const char* module, const char* name, uint64_t* handle) {
  if (!b || !module || !name || !handle) return REFUSE(b, "get_kernel: NULL argument");
  *handle = strcmp(module, "minimal") == 0 && strcmp(name, "scale_f32") == 0 ? 1 : 0;
  return *handle ? METRALE_STATUS_OK : FAIL(b, METRALE_STATUS_NOT_FOUND, "no kernel %s/%s (there is minimal/scale_f32)", module, name);
}

static metrale_status mem_alloc(metrale_backend* b, size_t bytes, uint64_t* ptr) {
  void* block;
  if (!b || !ptr) return REFUSE(b, "mem_alloc: ptr is NULL");
  *ptr = 0;
  block = malloc(bytes ? bytes : 1); /* 0 bytes: still a distinct address */
  if (!block || !metrale_glue_table_add(&b->memory, (uintptr_t)block, bytes)) {
    free(block);
    return FAIL(b, METRALE_STATUS_OUT_OF_MEMORY, "cannot allocate %zu bytes", bytes);
  }
  *ptr = (uintptr_t)block;
  return METRALE_STATUS_OK;
}

static metrale_status mem_free(metrale_backend* b, uint64_t ptr) {
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if (ptr != 0 && !metrale_glue_table_remove(&b->memory, ptr))
    return FAIL(b, METRALE_STATUS_NOT_FOUND, "0x%llx is not a live allocation", (unsigned long long)ptr);
  free(HOST(ptr));
  return METRALE_STATUS_OK;
}

/* What every copy checks: the stream exists (0 always does), the range lies in one allocation. */
static metrale_status check(metrale_backend* b, uint64_t stream, uint64_t address, size_t bytes) {
  if (stream && !metrale_glue_table_covers(&b->streams, stream, 1))
    return FAIL(b, METRALE_STATUS_NOT_FOUND, "no stream %llu", (unsigned long long)stream);
  if (bytes && !metrale_glue_table_covers(&b->memory, address, bytes))
    return FAIL(b, METRALE_STATUS_INVALID_ARGUMENT, "[0x%llx, +%zu) is not in an allocation", (unsigned long long)address, bytes);
  return METRALE_STATUS_OK;
}

/* Everything completes before it returns: streams are only names. */
static metrale_status copy_to_device(metrale_backend* b, uint64_t dst, const void* src, size_t n, uint64_t s) {
  metrale_status status = b ? check(b, s, dst, n) : METRALE_STATUS_INVALID_ARGUMENT;
  if (status == METRALE_STATUS_OK && n) {
    if (!src) return FAIL(b, METRALE_STATUS_INVALID_ARGUMENT, "src is NULL");
    memcpy(HOST(dst), src, n);
  }
  return status;
}
static metrale_status copy_to_host(metrale_backend* b, void* dst, uint64_t src, size_t n, uint64_t s) {
  metrale_status status = b ? check(b, s, src, n) : METRALE_STATUS_INVALID_ARGUMENT;
  if (status == METRALE_STATUS_OK && n) {
    if (!dst) return FAIL(b, METRALE_STATUS_INVALID_ARGUMENT, "dst is NULL");
    memcpy(dst, HOST(src), n);
  }
  return status;
}
static metrale_status copy_device(metrale_backend* b, uint64_t dst, uint64_t src, size_t n, uint64_t s) {
  metrale_status status = b ? check(b, s, dst, n) : METRALE_STATUS_INVALID_ARGUMENT;
  if (status == METRALE_STATUS_OK) status = check(b, s, src, n);
  if (status == METRALE_STATUS_OK && n) memmove(HOST(dst), HOST(src), n);
  return status;
}
static metrale_status memset_device(metrale_backend* b, uint64_t dst, uint8_t value, size_t n, uint64_t s) {
  metrale_status status = b ? check(b, s, dst, n) : METRALE_STATUS_INVALID_ARGUMENT;
  if (status == METRALE_STATUS_OK && n) memset(HOST(dst), value, n);
  return status;
}

static metrale_status stream_create(metrale_backend* b, uint64_t* stream) {
  uint64_t id;
  if (!b || !stream) return REFUSE(b, "stream_create: stream is NULL");
  id = metrale_glue_table_new_id(&b->streams);
  if (!metrale_glue_table_add(&b->streams, id, 1)) return FAIL(b, METRALE_STATUS_OUT_OF_MEMORY, "out of memory");
  *stream = id;
  return METRALE_STATUS_OK;
}
static metrale_status stream_destroy(metrale_backend* b, uint64_t stream) {
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if (stream == 0) return FAIL(b, METRALE_STATUS_INVALID_ARGUMENT, "stream 0 is never destroyed");
  if (!metrale_glue_table_remove(&b->streams, stream))
    return FAIL(b, METRALE_STATUS_NOT_FOUND, "no stream %llu", (unsigned long long)stream);
  return METRALE_STATUS_OK;
}
static metrale_status stream_synchronize(metrale_backend* b, uint64_t stream) {
  return b ? check(b, stream, 0, 0) : METRALE_STATUS_INVALID_ARGUMENT;
}

static metrale_status launch(metrale_backend* b, uint64_t kernel, const metrale_launch_config* config,
                             void* const* args, size_t arg_count) {
  char why[200];
  metrale_status status;
  uint64_t data;
  float factor, *values;
  uint32_t count, i;
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if (kernel != 1) return FAIL(b, METRALE_STATUS_NOT_FOUND, "unknown kernel handle %llu", (unsigned long long)kernel);
  if (metrale_glue_check_launch(config, args, arg_count, 3, why, sizeof why))
    return FAIL(b, METRALE_STATUS_INVALID_ARGUMENT, "minimal/scale_f32: %s", why);
  if ((status = check(b, config->stream, 0, 0))) return status;
  memcpy(&data, args[0], sizeof data);
  memcpy(&factor, args[1], sizeof factor);
  memcpy(&count, args[2], sizeof count);
  if (count && !metrale_glue_table_covers(&b->memory, data, (uint64_t)count * sizeof(float)))
    return FAIL(b, METRALE_STATUS_INVALID_ARGUMENT, "minimal/scale_f32: 'data' must hold count = %u floats", count);
  values = (float*)HOST(data);
  for (i = 0; i < count; ++i) values[i] *= factor;
  return METRALE_STATUS_OK;
}

static const metrale_plugin_table kTable = {
    sizeof(metrale_plugin_table), 1, describe, device_count, create, destroy, last_error, device_info,
    list_kernels, get_kernel, mem_alloc, mem_free, copy_to_device, copy_to_host, copy_device, memset_device,
    stream_create, stream_destroy, stream_synchronize, launch, NULL /* get_proc_address: no extensions */};

/* The one exported symbol: the version handshake, for ABI 1 (a literal: what this table implements). */
METRALE_GLUE_DEFINE_ENTRY(1, &kTable)
