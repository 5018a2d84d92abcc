/* SPDX-License-Identifier: MIT OR Apache-2.0
 * An out-of-tree metrale backend, "vendor", in plain C: host memory as "device" memory and its own
 * scalar CPU implementation of a subset of the W4A16 family (docs/kernels.md), enough for the
 * layers' dense FFN and `metrale conformance`:
 *   w4a16/w4a16_gemv, w4a16/w4a16_gemm_t, w4a16/w4a16_gemm_t_k64, act/silu_mul, act/gelu_mul,
 * plus an alternative variant of the tile GEMM, vendor/w4a16_gemm_t_alt (same parameters, a
 * different loop order: dequantize a weight row once, then run every input row against it), to be
 * swapped in with METRALE_KERNEL_SUBST=w4a16/w4a16_gemm_t=vendor/w4a16_gemm_t_alt.
 *
 * Built against nothing but the installed <metrale/plugin_abi.h>, <metrale/plugin_glue.h> and
 * <metrale/catalogue_signatures.h> (pkg-config metrale-plugin). Grids are advisory here: each
 * launch computes the whole output on the calling thread. tests/plugin_cts checks it against the
 * ABI contract. */
#include <metrale/catalogue_signatures.h>
#include <metrale/plugin_glue.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VENDOR_VERSION "1.0.0"
/* The ABI this file implements: a literal, not METRALE_ABI_VERSION, so a newer header cannot make
 * the plugin claim a version whose table it does not fill. */
#define VENDOR_ABI 1u

struct metrale_backend {
  metrale_glue_error_slot error;
  metrale_glue_table allocations; /* live host blocks: (address, bytes) */
  metrale_glue_table streams;     /* live stream ids: (id, 1) */
};

/* ---- number formats (docs/kernels.md) ---- */

static float bf16_to_f32(uint16_t v) {
  uint32_t bits = (uint32_t)v << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* NaN stays NaN */
  bits += 0x7fffu + ((bits >> 16) & 1u);                  /* round to nearest even */
  return (uint16_t)(bits >> 16);
}

static float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { /* subnormal: normalise */
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* ---- kernels ---- */

enum kernel_id { K_GEMV = 1, K_GEMM_T, K_GEMM_T_K64, K_SILU_MUL, K_GELU_MUL, K_GEMM_T_ALT };

/* Index i of this table is kernel handle i + 1. The documented kernels' parameter lists come from
 * the installed <metrale/catalogue_signatures.h>, generated from the kernel catalogue; the
 * alternative takes w4a16_gemm_t's. */
static const metrale_kernel_desc kKernels[] = {
    METRALE_CATALOGUE_DESC(w4a16, w4a16_gemv),
    METRALE_CATALOGUE_DESC(w4a16, w4a16_gemm_t),
    METRALE_CATALOGUE_DESC(w4a16, w4a16_gemm_t_k64),
    METRALE_CATALOGUE_DESC(act, silu_mul),
    METRALE_CATALOGUE_DESC(act, gelu_mul),
    {"vendor", "w4a16_gemm_t_alt", METRALE_CATALOGUE_TYPES(w4a16, w4a16_gemm_t),
     METRALE_CATALOGUE_PARAM_COUNT(w4a16, w4a16_gemm_t)},
};
#define KERNEL_COUNT (sizeof kKernels / sizeof kKernels[0])

#define PTR(arg) ((void*)(uintptr_t)(*(const uint64_t*)(arg)))
#define U32(arg) (*(const uint32_t*)(arg))

/* y[m, n] = x[m, k] . W^T, f32 accumulation: per group of 128, sum (q - 8) * x, then times the scale. */
static void w4a16_rows(const uint16_t* x, const uint32_t* qweight, const uint16_t* scales, uint16_t* y, uint32_t m,
                       uint32_t n, uint32_t k) {
  const uint32_t words = k / 8, groups = k / 128;
  for (uint32_t r = 0; r < m; ++r) {
    const uint16_t* xr = x + (size_t)r * k;
    for (uint32_t c = 0; c < n; ++c) {
      const uint32_t* q = qweight + (size_t)c * words;
      float acc = 0.0f;
      for (uint32_t g = 0; g < groups; ++g) {
        float part = 0.0f;
        for (uint32_t w = g * 16; w < g * 16 + 16; ++w) {
          const uint32_t word = q[w];
          for (uint32_t j = 0; j < 8; ++j)
            part += (float)((int)((word >> (4 * j)) & 0xfu) - 8) * bf16_to_f32(xr[w * 8 + j]);
        }
        acc += part * f16_to_f32(scales[(size_t)c * groups + g]);
      }
      y[(size_t)r * n + c] = f32_to_bf16(acc);
    }
  }
}

/* The alternative variant: dequantize weight row c once (f32 holds (q - 8) * s exactly), then dot it
 * with every input row. Different order of operations, same contract and tolerance. */
static metrale_status w4a16_rows_alt(const uint16_t* x, const uint32_t* qweight, const uint16_t* scales, uint16_t* y,
                                     uint32_t m, uint32_t n, uint32_t k) {
  float* row = malloc((size_t)k * sizeof *row);
  if (!row) return METRALE_STATUS_OUT_OF_MEMORY;
  const uint32_t words = k / 8, groups = k / 128;
  for (uint32_t c = 0; c < n; ++c) {
    for (uint32_t i = 0; i < k; ++i) {
      const uint32_t code = (qweight[(size_t)c * words + i / 8] >> (4 * (i % 8))) & 0xfu;
      row[i] = (float)((int)code - 8) * f16_to_f32(scales[(size_t)c * groups + i / 128]);
    }
    for (uint32_t r = 0; r < m; ++r) {
      const uint16_t* xr = x + (size_t)r * k;
      float acc = 0.0f;
      for (uint32_t i = 0; i < k; ++i) acc += row[i] * bf16_to_f32(xr[i]);
      y[(size_t)r * n + c] = f32_to_bf16(acc);
    }
  }
  free(row);
  return METRALE_STATUS_OK;
}

static float silu(float g) { return g / (1.0f + expf(-g)); }
static float gelu_tanh(float g) { return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))); }

static void act_mul(int gelu, const uint16_t* gate_up, uint16_t* out, uint32_t m, uint32_t inter) {
  for (uint32_t r = 0; r < m; ++r) {
    const uint16_t* row = gate_up + (size_t)r * 2 * inter;
    for (uint32_t j = 0; j < inter; ++j) {
      const float g = bf16_to_f32(row[j]), u = bf16_to_f32(row[inter + j]);
      out[(size_t)r * inter + j] = f32_to_bf16((gelu ? gelu_tanh(g) : silu(g)) * u);
    }
  }
}

/* ---- entry points ---- */

#define HOST(address) ((void*)(uintptr_t)(address))

static metrale_status describe(metrale_plugin_info* out) {
  if (!out) return METRALE_STATUS_INVALID_ARGUMENT;
  out->backend_name = "vendor";
  out->version = VENDOR_VERSION;
  out->description = "example out-of-tree backend: W4A16 subset on the host (docs/examples/vendor-plugin)";
  return METRALE_STATUS_OK;
}

static metrale_status device_count(uint32_t* count, char* error, size_t size) {
  if (!count) {
    metrale_glue_write_error(error, size, "vendor backend: device_count: count is NULL");
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
  *count = 1;
  return METRALE_STATUS_OK;
}

static metrale_status create(const metrale_backend_create_info* info, metrale_backend** out, char* error,
                             size_t size) {
  if (out) *out = NULL;
  if (!out || !info || !info->host || !info->host->log) {
    metrale_glue_write_error(error, size, "vendor backend: create needs create_info, host callbacks with log, and out");
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
  if (info->device_index != 0) {
    metrale_glue_format_error(error, size, "vendor backend has one device (index 0); asked for index %u",
                              info->device_index);
    return METRALE_STATUS_NOT_FOUND;
  }
  for (uint32_t i = 0; i < info->option_count && info->options; ++i) {
    const metrale_option* option = &info->options[i];
    char line[256];
    if (!option->key || !option->value) {
      metrale_glue_format_error(error, size, "vendor backend: option %u has a NULL key or value", i);
      return METRALE_STATUS_INVALID_ARGUMENT;
    }
    snprintf(line, sizeof line, "vendor backend: ignoring unknown option %s=%s", option->key, option->value);
    info->host->log(info->host->user, METRALE_LOG_WARN, line);
  }
  metrale_backend* b = calloc(1, sizeof *b);
  if (!b) {
    metrale_glue_write_error(error, size, "vendor backend: out of host memory creating the instance");
    return METRALE_STATUS_OUT_OF_MEMORY;
  }
  metrale_glue_error_init(&b->error);
  metrale_glue_table_init(&b->allocations);
  metrale_glue_table_init(&b->streams);
  info->host->log(info->host->user, METRALE_LOG_DEBUG, "vendor backend created");
  *out = b;
  return METRALE_STATUS_OK;
}

static void destroy(metrale_backend* b) {
  if (!b) return;
  for (size_t i = 0; i < b->allocations.count; ++i) free(HOST(b->allocations.items[i].start));
  metrale_glue_table_destroy(&b->allocations);
  metrale_glue_table_destroy(&b->streams);
  free(b);
}

static const char* last_error(metrale_backend* b) { return b ? metrale_glue_last_error(&b->error) : ""; }

static metrale_status device_info(metrale_backend* b, metrale_device_info* out) {
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if (!out) return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "vendor backend: device_info: out is NULL");
  out->name = "vendor host device";
  out->target = "vendor-host";
  out->memory_bytes = 0;
  out->compute_units = 1;
  return METRALE_STATUS_OK;
}

static metrale_status list_kernels(metrale_backend* b, const metrale_kernel_desc** kernels, size_t* count) {
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if (!kernels || !count)
    return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "vendor backend: list_kernels: NULL out-pointer");
  *kernels = kKernels;
  *count = KERNEL_COUNT;
  return METRALE_STATUS_OK;
}

static metrale_status get_kernel(metrale_backend* b, const char* module, const char* name, uint64_t* handle) {
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if (!module || !name || !handle)
    return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "vendor backend: get_kernel: NULL argument");
  *handle = 0;
  for (size_t i = 0; i < KERNEL_COUNT; ++i) {
    if (strcmp(module, kKernels[i].module) == 0 && strcmp(name, kKernels[i].name) == 0) {
      *handle = i + 1;
      return METRALE_STATUS_OK;
    }
  }
  return metrale_glue_fail(&b->error, METRALE_STATUS_NOT_FOUND, "vendor backend has no kernel %s/%s", module, name);
}

static metrale_status mem_alloc(metrale_backend* b, size_t bytes, uint64_t* ptr) {
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if (!ptr) return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "vendor backend: mem_alloc: ptr is NULL");
  *ptr = 0;
  void* block = malloc(bytes ? bytes : 1); /* a zero-byte request still gets a distinct address */
  if (!block || !metrale_glue_table_add(&b->allocations, (uint64_t)(uintptr_t)block, bytes)) {
    free(block);
    return metrale_glue_fail(&b->error, METRALE_STATUS_OUT_OF_MEMORY, "vendor backend: cannot allocate %zu bytes", bytes);
  }
  *ptr = (uint64_t)(uintptr_t)block;
  return METRALE_STATUS_OK;
}

static metrale_status mem_free(metrale_backend* b, uint64_t ptr) {
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if (ptr == 0) return METRALE_STATUS_OK; /* like free(NULL) */
  if (!metrale_glue_table_remove(&b->allocations, ptr))
    return metrale_glue_fail(&b->error, METRALE_STATUS_NOT_FOUND,
                             "vendor backend: mem_free: 0x%llx is not a live allocation of this instance",
                             (unsigned long long)ptr);
  free(HOST(ptr));
  return METRALE_STATUS_OK;
}

/* The stream exists (0 always does). Every call completes before it returns, so streams are only names. */
static metrale_status check_stream(metrale_backend* b, const char* what, uint64_t stream) {
  if (stream == 0 || metrale_glue_table_covers(&b->streams, stream, 1)) return METRALE_STATUS_OK;
  return metrale_glue_fail(&b->error, METRALE_STATUS_NOT_FOUND, "vendor backend: %s: no stream %llu on this instance",
                           what, (unsigned long long)stream);
}

/* [address, address + bytes) lies inside one live allocation. */
static metrale_status check_range(metrale_backend* b, const char* what, uint64_t address, size_t bytes) {
  if (bytes == 0 || metrale_glue_table_covers(&b->allocations, address, bytes)) return METRALE_STATUS_OK;
  return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT,
                           "vendor backend: %s: [0x%llx, +%zu bytes) is not inside a live allocation", what,
                           (unsigned long long)address, bytes);
}

static metrale_status copy_to_device(metrale_backend* b, uint64_t dst, const void* src, size_t n, uint64_t s) {
  metrale_status status;
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if ((status = check_stream(b, "copy_to_device", s)) || (status = check_range(b, "copy_to_device", dst, n))) return status;
  if (n && !src) return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "vendor backend: copy_to_device: src is NULL");
  if (n) memcpy(HOST(dst), src, n);
  return METRALE_STATUS_OK;
}
static metrale_status copy_to_host(metrale_backend* b, void* dst, uint64_t src, size_t n, uint64_t s) {
  metrale_status status;
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if ((status = check_stream(b, "copy_to_host", s)) || (status = check_range(b, "copy_to_host", src, n))) return status;
  if (n && !dst) return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "vendor backend: copy_to_host: dst is NULL");
  if (n) memcpy(dst, HOST(src), n);
  return METRALE_STATUS_OK;
}
static metrale_status copy_device(metrale_backend* b, uint64_t dst, uint64_t src, size_t n, uint64_t s) {
  metrale_status status;
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if ((status = check_stream(b, "copy_device", s)) || (status = check_range(b, "copy_device destination", dst, n)) ||
      (status = check_range(b, "copy_device source", src, n)))
    return status;
  if (n) memmove(HOST(dst), HOST(src), n);
  return METRALE_STATUS_OK;
}
static metrale_status memset_device(metrale_backend* b, uint64_t dst, uint8_t v, size_t n, uint64_t s) {
  metrale_status status;
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if ((status = check_stream(b, "memset_device", s)) || (status = check_range(b, "memset_device", dst, n))) return status;
  if (n) memset(HOST(dst), v, n);
  return METRALE_STATUS_OK;
}

static metrale_status stream_create(metrale_backend* b, uint64_t* stream) {
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if (!stream) return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "vendor backend: stream_create: stream is NULL");
  const uint64_t id = metrale_glue_table_new_id(&b->streams);
  if (!metrale_glue_table_add(&b->streams, id, 1))
    return metrale_glue_fail(&b->error, METRALE_STATUS_OUT_OF_MEMORY, "vendor backend: stream_create: out of host memory");
  *stream = id;
  return METRALE_STATUS_OK;
}
static metrale_status stream_destroy(metrale_backend* b, uint64_t s) {
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if (s == 0)
    return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "vendor backend: the default stream 0 is never destroyed");
  if (!metrale_glue_table_remove(&b->streams, s))
    return metrale_glue_fail(&b->error, METRALE_STATUS_NOT_FOUND, "vendor backend: stream_destroy: no stream %llu",
                             (unsigned long long)s);
  return METRALE_STATUS_OK;
}
static metrale_status stream_synchronize(metrale_backend* b, uint64_t s) {
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  return check_stream(b, "stream_synchronize", s);
}

/* Bytes each pointer argument must hold, per docs/kernels.md: x, qweight, scales, y for the GEMMs
 * (x is [m, k] bf16, qweight [n, k/8] u32, scales [n, k/128] f16, y [m, n] bf16); gate_up and out
 * for the activations ([m, 2i] and [m, i] bf16). */
static metrale_status check_buffers(metrale_backend* b, const metrale_kernel_desc* d, void* const* args) {
  uint64_t need[4];
  size_t count;
  if (d->param_count == 4) { /* act: gate_up, out, m, i */
    const uint64_t m = U32(args[2]), i = U32(args[3]);
    need[0] = m * 2 * i * 2, need[1] = m * i * 2, count = 2;
  } else {
    const uint64_t m = U32(args[4]), n = U32(args[5]), k = U32(args[6]);
    need[0] = m * k * 2, need[1] = n * (k / 8) * 4, need[2] = n * (k / 128) * 2, need[3] = m * n * 2, count = 4;
  }
  for (size_t p = 0; p < count; ++p) {
    const uint64_t address = *(const uint64_t*)args[p];
    if (need[p] && !metrale_glue_table_covers(&b->allocations, address, need[p]))
      return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT,
                               "vendor backend: %s/%s: pointer argument %zu must hold %llu bytes of one live allocation",
                               d->module, d->name, p, (unsigned long long)need[p]);
  }
  return METRALE_STATUS_OK;
}

static metrale_status launch(metrale_backend* b, uint64_t kernel, const metrale_launch_config* config,
                             void* const* args, size_t arg_count) {
  char why[256];
  metrale_status status;
  if (!b) return METRALE_STATUS_INVALID_ARGUMENT;
  if (kernel == 0 || kernel > KERNEL_COUNT)
    return metrale_glue_fail(&b->error, METRALE_STATUS_NOT_FOUND, "vendor backend: unknown kernel handle %llu",
                             (unsigned long long)kernel);
  const metrale_kernel_desc* d = &kKernels[kernel - 1];
  if (metrale_glue_check_launch(config, args, arg_count, d->param_count, why, sizeof why))
    return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT, "vendor backend: %s/%s: %s", d->module, d->name, why);
  if ((status = check_stream(b, "launch", config->stream))) return status;
  if (kernel != K_SILU_MUL && kernel != K_GELU_MUL) {
    const uint32_t m = U32(args[4]), k = U32(args[6]);
    if (k % 128 != 0)
      return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT,
                               "vendor backend: %s/%s needs k a multiple of 128, got k = %u", d->module, d->name, k);
    if (kernel == K_GEMV && m != 1)
      return metrale_glue_fail(&b->error, METRALE_STATUS_INVALID_ARGUMENT,
                               "vendor backend: w4a16/w4a16_gemv takes exactly 1 row, got m = %u", m);
  }
  if ((status = check_buffers(b, d, args))) return status;
  if (kernel == K_SILU_MUL || kernel == K_GELU_MUL) {
    act_mul(kernel == K_GELU_MUL, PTR(args[0]), PTR(args[1]), U32(args[2]), U32(args[3]));
    return METRALE_STATUS_OK;
  }
  const uint32_t m = U32(args[4]), n = U32(args[5]), k = U32(args[6]);
  if (kernel == K_GEMM_T_ALT) {
    status = w4a16_rows_alt(PTR(args[0]), PTR(args[1]), PTR(args[2]), PTR(args[3]), m, n, k);
    return status == METRALE_STATUS_OK ? status
                                       : metrale_glue_fail(&b->error, status, "vendor backend: out of host memory in w4a16_gemm_t_alt");
  }
  w4a16_rows(PTR(args[0]), PTR(args[1]), PTR(args[2]), PTR(args[3]), m, n, k);
  return METRALE_STATUS_OK;
}

static const metrale_plugin_table kTable = {
    sizeof(metrale_plugin_table), VENDOR_ABI, describe, device_count, create, destroy, last_error,
    device_info, list_kernels, get_kernel, mem_alloc, mem_free, copy_to_device, copy_to_host, copy_device,
    memset_device, stream_create, stream_destroy, stream_synchronize, launch,
    NULL /* get_proc_address: no extensions */};

/* The handshake (plugin_glue.h): speak version 1 when the runtime's range includes it, else say which we speak. */
METRALE_GLUE_DEFINE_ENTRY(VENDOR_ABI, &kTable)
