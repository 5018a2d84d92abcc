/* SPDX-License-Identifier: MIT OR Apache-2.0
 * An out-of-tree metrale backend, "vendor", in plain C: host memory as "device" memory and its own
 * scalar CPU implementation of a subset of the W4A16 family (docs/kernels.md), enough for the
 * layers' dense FFN and `metrale conformance`:
 *   w4a16/w4a16_gemv, w4a16/w4a16_gemm_t, w4a16/w4a16_gemm_t_k64, act/silu_mul, act/gelu_mul,
 * plus an alternative variant of the tile GEMM, vendor/w4a16_gemm_t_alt (same parameters, a
 * different loop order: dequantize a weight row once, then run every input row against it), to be
 * swapped in with METRALE_KERNEL_SUBST=w4a16/w4a16_gemm_t=vendor/w4a16_gemm_t_alt.
 *
 * Built against nothing but the installed <metrale/plugin_abi.h> (pkg-config metrale-plugin).
 * Grids are advisory here: each launch computes the whole output on the calling thread. */
#include <metrale/plugin_abi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VENDOR_VERSION "1.0.0"
/* The ABI this file implements: a literal, not METRALE_ABI_VERSION, so a newer header cannot make
 * the plugin claim a version whose table it does not fill. */
#define VENDOR_ABI 1u

struct metrale_backend {
  char last_error[512];
  uint64_t next_stream;
  const metrale_host_callbacks* host;
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

static const metrale_param_type kGemmParams[] = {METRALE_PARAM_PTR, METRALE_PARAM_PTR, METRALE_PARAM_PTR,
                                                 METRALE_PARAM_PTR, METRALE_PARAM_U32, METRALE_PARAM_U32,
                                                 METRALE_PARAM_U32};
static const metrale_param_type kActParams[] = {METRALE_PARAM_PTR, METRALE_PARAM_PTR, METRALE_PARAM_U32,
                                                METRALE_PARAM_U32};

/* Index i of this table is kernel handle i + 1. */
static const metrale_kernel_desc kKernels[] = {
    {"w4a16", "w4a16_gemv", kGemmParams, 7},      {"w4a16", "w4a16_gemm_t", kGemmParams, 7},
    {"w4a16", "w4a16_gemm_t_k64", kGemmParams, 7}, {"act", "silu_mul", kActParams, 4},
    {"act", "gelu_mul", kActParams, 4},            {"vendor", "w4a16_gemm_t_alt", kGemmParams, 7},
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

static metrale_status fail(metrale_backend* b, metrale_status status, const char* message) {
  snprintf(b->last_error, sizeof b->last_error, "%s", message);
  return status;
}

static metrale_status describe(metrale_plugin_info* out) {
  out->backend_name = "vendor";
  out->version = VENDOR_VERSION;
  out->description = "example out-of-tree backend: W4A16 subset on the host (docs/examples/vendor-plugin)";
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
    snprintf(error, size, "vendor backend has one device (index 0); asked for index %u", info->device_index);
    return METRALE_STATUS_NOT_FOUND;
  }
  metrale_backend* b = calloc(1, sizeof *b);
  if (!b) {
    snprintf(error, size, "vendor backend: out of host memory creating the instance");
    return METRALE_STATUS_OUT_OF_MEMORY;
  }
  b->next_stream = 1;
  b->host = info->host;
  if (b->host && b->host->log) b->host->log(b->host->user, METRALE_LOG_DEBUG, "vendor backend created");
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
  *count = KERNEL_COUNT;
  return METRALE_STATUS_OK;
}

static metrale_status get_kernel(metrale_backend* b, const char* module, const char* name, uint64_t* handle) {
  for (size_t i = 0; i < KERNEL_COUNT; ++i) {
    if (strcmp(module, kKernels[i].module) == 0 && strcmp(name, kKernels[i].name) == 0) {
      *handle = i + 1;
      return METRALE_STATUS_OK;
    }
  }
  char message[256];
  snprintf(message, sizeof message, "vendor backend has no kernel %s/%s", module, name);
  return fail(b, METRALE_STATUS_NOT_FOUND, message);
}

static metrale_status mem_alloc(metrale_backend* b, size_t bytes, uint64_t* ptr) {
  void* block = malloc(bytes ? bytes : 1);
  if (!block) return fail(b, METRALE_STATUS_OUT_OF_MEMORY, "vendor backend: malloc failed");
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
/* Every call completes before it returns, so streams are only names. */
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
  if (kernel == 0 || kernel > KERNEL_COUNT) return fail(b, METRALE_STATUS_NOT_FOUND, "vendor backend: unknown kernel handle");
  const metrale_kernel_desc* d = &kKernels[kernel - 1];
  if (arg_count != d->param_count) {
    char message[256];
    snprintf(message, sizeof message, "vendor backend: %s/%s takes %u arguments, got %zu", d->module, d->name,
             d->param_count, arg_count);
    return fail(b, METRALE_STATUS_INVALID_ARGUMENT, message);
  }
  if (kernel == K_SILU_MUL || kernel == K_GELU_MUL) {
    act_mul(kernel == K_GELU_MUL, PTR(args[0]), PTR(args[1]), U32(args[2]), U32(args[3]));
    return METRALE_STATUS_OK;
  }
  const uint32_t m = U32(args[4]), n = U32(args[5]), k = U32(args[6]);
  if (k % 128 != 0) {
    char message[256];
    snprintf(message, sizeof message, "vendor backend: %s/%s needs k a multiple of 128, got k = %u", d->module, d->name, k);
    return fail(b, METRALE_STATUS_INVALID_ARGUMENT, message);
  }
  if (kernel == K_GEMV && m != 1) {
    char message[256];
    snprintf(message, sizeof message, "vendor backend: w4a16/w4a16_gemv takes exactly 1 row, got m = %u", m);
    return fail(b, METRALE_STATUS_INVALID_ARGUMENT, message);
  }
  if (kernel == K_GEMM_T_ALT) {
    const metrale_status s = w4a16_rows_alt(PTR(args[0]), PTR(args[1]), PTR(args[2]), PTR(args[3]), m, n, k);
    return s == METRALE_STATUS_OK ? s : fail(b, s, "vendor backend: out of host memory in w4a16_gemm_t_alt");
  }
  w4a16_rows(PTR(args[0]), PTR(args[1]), PTR(args[2]), PTR(args[3]), m, n, k);
  return METRALE_STATUS_OK;
}

static const metrale_plugin_table kTable = {
    sizeof(metrale_plugin_table), VENDOR_ABI, describe, device_count, create, destroy, last_error,
    device_info, list_kernels, get_kernel, mem_alloc, mem_free, copy_to_device, copy_to_host, copy_device,
    memset_device, stream_create, stream_destroy, stream_synchronize, launch,
    NULL /* get_proc_address: no extensions */};

/* The handshake: speak version 1 when the runtime's range includes it, else say which we speak. */
METRALE_PLUGIN_EXPORT metrale_status metrale_plugin_entry(uint32_t runtime_min, uint32_t runtime_max,
                                                          uint32_t* chosen, const metrale_plugin_table** table) {
  *chosen = VENDOR_ABI;
  if (runtime_min > VENDOR_ABI || runtime_max < VENDOR_ABI) return METRALE_STATUS_INCOMPATIBLE;
  *table = &kTable;
  return METRALE_STATUS_OK;
}
