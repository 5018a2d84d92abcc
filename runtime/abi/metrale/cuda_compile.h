/* SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * An extension of the CUDA plugin (libmetrale_cuda.so): compile the manifest's modules for a named
 * target with NVRTC, through the on-disk cache, without a GPU or a driver. The plugin exports no
 * symbol for it: its table's get_proc_address answers METRALE_CUDA_COMPILE_NAME with a
 * metrale_cuda_compile_fn and METRALE_CUDA_COMPILE_FREE_NAME with a metrale_cuda_compile_free_fn.
 * `metrale compile` reaches them through the runtime's registry (Registry::extension), after the
 * handshake and the manifest's checks, so the metrale binary itself never links NVRTC.
 *
 * Plain C, like plugin_abi.h: nothing C++ crosses it and no exception escapes. The result is
 * owned by the plugin and freed with the free entry. Kernel source and cache directories come
 * from the caller (the runtime's), never from the plugin's build.
 */
#ifndef METRALE_CUDA_COMPILE_H
#define METRALE_CUDA_COMPILE_H

#include <metrale/plugin_abi.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Names for metrale_plugin_table.get_proc_address. */
#define METRALE_CUDA_COMPILE_NAME "metrale_cuda_compile"
#define METRALE_CUDA_COMPILE_FREE_NAME "metrale_cuda_compile_free"

/* Resource usage of one kernel in the compiled image; -1 where unknown. */
typedef struct metrale_cuda_kernel_report {
  const char* name;
  int32_t registers;
  int32_t spill_store_bytes;
  int32_t spill_load_bytes;
  int32_t stack_bytes;
  int32_t shared_bytes;  /* static shared memory */
  const char* problem;   /* "" or why the manifest's kernel cannot be used from this image */
} metrale_cuda_kernel_report;

typedef enum metrale_cuda_module_outcome {
  METRALE_CUDA_MODULE_COMPILED = 0,  /* compiled by NVRTC (and stored in the cache) */
  METRALE_CUDA_MODULE_CACHED = 1,    /* loaded from the cache */
  METRALE_CUDA_MODULE_GATED = 2,     /* every kernel requires a newer target: not compiled */
  METRALE_CUDA_MODULE_FAILED = 3     /* see status and message */
} metrale_cuda_module_outcome;

typedef struct metrale_cuda_module_report {
  const char* module;
  const char* source_path;          /* "" when the source was not found */
  metrale_cuda_module_outcome outcome;
  metrale_status status;            /* OK, or why the module or one of its kernels is unusable */
  const char* message;              /* gate reason, or the failure with NVRTC's log; "" otherwise */
  double seconds;                   /* compile or cache read time */
  uint64_t image_bytes;             /* CUBIN (or PTX) size */
  int32_t is_cubin;
  const metrale_cuda_kernel_report* kernels;  /* the manifest's kernels of this module */
  uint32_t kernel_count;
} metrale_cuda_module_report;

typedef struct metrale_cuda_compile_request {
  uint32_t struct_size;                    /* sizeof(metrale_cuda_compile_request) */
  const char* target;                      /* "sm_80", "sm_90a", ... */
  const char* manifest_json;               /* the CUDA manifest's text */
  const char* manifest_path;               /* for messages; may be NULL */
  const char* const* kernel_source_dirs;   /* searched in order; the plugin has no default */
  uint32_t kernel_source_dir_count;
  const char* cache_dir;                   /* NULL: no cache */
  const char* const* modules;              /* modules to compile; NULL or 0: all */
  uint32_t module_count;
  void* user;                              /* passed back to the callbacks */
  /* Optional: plugin messages (cache corruption warnings...). */
  void (*log)(void* user, metrale_log_level level, const char* message);
  /* Optional: called with finished = 0 when a module starts (only report->module is set) and
   * finished = 1 with its full report when it ends. */
  void (*progress)(void* user, const metrale_cuda_module_report* report, int32_t finished);
} metrale_cuda_compile_request;

typedef struct metrale_cuda_compile_result {
  uint32_t struct_size;         /* sizeof(metrale_cuda_compile_result) */
  const char* target;
  const char* nvrtc_version;    /* "13.0" */
  const char* cuda_include_dir; /* where cuda_bf16.h was found */
  const char* cache_dir;        /* the cache's own directory, "" when off */
  const metrale_cuda_module_report* modules;
  uint32_t module_count;
} metrale_cuda_compile_result;

/* OK when every requested module was processed (each report says how it went); an error status
 * and message for a request that cannot be run: unknown target, unknown module, bad manifest. */
typedef metrale_status (*metrale_cuda_compile_fn)(const metrale_cuda_compile_request* request,
                                                  metrale_cuda_compile_result** result,
                                                  char* error, size_t error_size);
typedef void (*metrale_cuda_compile_free_fn)(metrale_cuda_compile_result* result);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* METRALE_CUDA_COMPILE_H */
