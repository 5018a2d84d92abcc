/* SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * metrale plugin ABI: the only header a backend plugin needs.
 *
 * Plain C. Nothing C++ crosses this boundary: no exceptions, no STL types, no allocator.
 * Every entry point returns a metrale_status; a plugin catches everything inside and turns it
 * into a status plus a message readable through metrale_plugin_table.last_error.
 *
 * Life cycle (see docs/plugin-abi.md):
 *   1. The runtime resolves METRALE_PLUGIN_ENTRY_SYMBOL and calls it with the range of ABI
 *      versions it speaks. The plugin answers the version it will use and its table, or refuses
 *      with METRALE_STATUS_INCOMPATIBLE. Nothing else is called before this handshake.
 *   2. create() makes a backend instance bound to one device; destroy() ends it.
 *   3. Kernel lookup, memory, streams and launches go through the instance.
 *
 * Versioning: tables carry struct_size and fields are only ever appended, without a new ABI
 * version. A reader checks struct_size (METRALE_STRUCT_HAS) before touching an appended field.
 *
 * Ownership: strings and arrays a plugin returns stay valid until the instance (or, for
 * describe(), the library) goes away. Strings and arrays the runtime passes in are valid only for
 * the duration of the call; copy what you keep.
 *
 * Threading: the runtime serialises create/destroy. Every other instance entry point may be
 * called from several threads at once; a plugin that cannot allow that must lock inside.
 */
#ifndef METRALE_PLUGIN_ABI_H
#define METRALE_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI versions this header describes. A runtime built from it offers
 * [METRALE_ABI_VERSION_MIN, METRALE_ABI_VERSION]. */
#define METRALE_ABI_VERSION 1u
#define METRALE_ABI_VERSION_MIN 1u

/* Name of the one symbol a plugin exports (type metrale_plugin_entry_fn). */
#define METRALE_PLUGIN_ENTRY_SYMBOL "metrale_plugin_entry"

#if defined(_WIN32)
#define METRALE_PLUGIN_EXPORT __declspec(dllexport)
#else
#define METRALE_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Whether *ptr, a `type` (a struct with struct_size first), was built with `field`: appended
 * fields are read only when this holds. */
#define METRALE_STRUCT_HAS(type, ptr, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof(((const type*)0)->field))

/* Outcome of every entry point. Distinct enough that the runtime can tell the user what kind of
 * problem it met without parsing messages. */
typedef enum metrale_status {
  METRALE_STATUS_OK = 0,
  METRALE_STATUS_NOT_FOUND = 1,        /* no such kernel, device, stream or pointer */
  METRALE_STATUS_UNAVAILABLE = 2,      /* backend cannot run here: no driver, no device */
  METRALE_STATUS_INCOMPATIBLE = 3,     /* ABI version, target or signature mismatch */
  METRALE_STATUS_INVALID_ARGUMENT = 4, /* caller passed something malformed */
  METRALE_STATUS_OUT_OF_MEMORY = 5,    /* host or device allocation failed */
  METRALE_STATUS_UNIMPLEMENTED = 6,    /* optional entry point the plugin does not offer */
  METRALE_STATUS_INTERNAL = 7          /* bug or unexpected failure inside the plugin */
} metrale_status;

/* Types a kernel parameter may have. Device pointers travel as METRALE_PARAM_PTR (a 64-bit
 * device address, for the CPU backend a host address). */
typedef enum metrale_param_type {
  METRALE_PARAM_PTR = 1,
  METRALE_PARAM_U32 = 2,
  METRALE_PARAM_I32 = 3,
  METRALE_PARAM_U64 = 4,
  METRALE_PARAM_I64 = 5,
  METRALE_PARAM_F32 = 6,
  METRALE_PARAM_F64 = 7
} metrale_param_type;

/* The spelling manifests use for a parameter type: "ptr", "u32", "i32", "u64", "i64", "f32",
 * "f64"; NULL for a value outside the enum. */
static inline const char* metrale_param_type_name(metrale_param_type type) {
  switch (type) {
    case METRALE_PARAM_PTR: return "ptr";
    case METRALE_PARAM_U32: return "u32";
    case METRALE_PARAM_I32: return "i32";
    case METRALE_PARAM_U64: return "u64";
    case METRALE_PARAM_I64: return "i64";
    case METRALE_PARAM_F32: return "f32";
    case METRALE_PARAM_F64: return "f64";
  }
  return NULL;
}

/* The parameter type a manifest spelling names: 1 and *type set, or 0 for an unknown name. */
static inline int metrale_param_type_parse(const char* name, metrale_param_type* type) {
  static const metrale_param_type all[] = {METRALE_PARAM_PTR, METRALE_PARAM_U32, METRALE_PARAM_I32,
                                           METRALE_PARAM_U64, METRALE_PARAM_I64, METRALE_PARAM_F32,
                                           METRALE_PARAM_F64};
  size_t i;
  for (i = 0; i < sizeof all / sizeof all[0]; ++i) {
    if (strcmp(name, metrale_param_type_name(all[i])) == 0) {
      *type = all[i];
      return 1;
    }
  }
  return 0;
}

/* Log levels of metrale_host_callbacks.log, matching spdlog's order. */
typedef enum metrale_log_level {
  METRALE_LOG_TRACE = 0,
  METRALE_LOG_DEBUG = 1,
  METRALE_LOG_INFO = 2,
  METRALE_LOG_WARN = 3,
  METRALE_LOG_ERROR = 4
} metrale_log_level;

/* Opaque backend instance, defined by each plugin. */
typedef struct metrale_backend metrale_backend;

/* What the runtime lends a backend instance. */
typedef struct metrale_host_callbacks {
  uint32_t struct_size;                         /* sizeof(metrale_host_callbacks) */
  void* user;                                   /* passed back to every callback */
  void (*log)(void* user, metrale_log_level level, const char* message); /* required */
} metrale_host_callbacks;

/* One key=value option for create(); unknown keys are ignored by the plugin (and logged). */
typedef struct metrale_option {
  const char* key;
  const char* value;
} metrale_option;

/* Everything create() needs. */
typedef struct metrale_backend_create_info {
  uint32_t struct_size;                     /* sizeof(metrale_backend_create_info) */
  const metrale_host_callbacks* host;       /* required; valid until destroy() */
  uint32_t device_index;                    /* which device the instance drives */
  const char* cache_dir;                    /* where compiled artefacts may go; NULL: none */
  const char* const* kernel_source_dirs;    /* searched in order for kernel sources; may be NULL */
  uint32_t kernel_source_dir_count;         /* entries in kernel_source_dirs */
  const char* manifest_path;                /* the manifest that named this plugin */
  const char* manifest_json;                /* its text, so JIT backends can read their modules */
  const metrale_option* options;            /* backend-specific options; may be NULL */
  uint32_t option_count;                    /* entries in options */
} metrale_backend_create_info;

/* Static facts about the plugin, known before any instance exists. */
typedef struct metrale_plugin_info {
  uint32_t struct_size;     /* sizeof(metrale_plugin_info) */
  const char* backend_name; /* e.g. "cpu", "cuda"; must equal the manifest's "backend" */
  const char* version;      /* the plugin's own version string */
  const char* description;  /* one line for `metrale list` */
} metrale_plugin_info;

/* Facts about the device an instance drives. */
typedef struct metrale_device_info {
  uint32_t struct_size;     /* sizeof(metrale_device_info) */
  const char* name;         /* human name, e.g. "NVIDIA H100" or the CPU model */
  const char* target;       /* e.g. "sm_90", "cpu-x86_64-avx512" */
  uint64_t memory_bytes;    /* usable device memory; 0 if unknown */
  uint32_t compute_units;   /* SMs or worker threads */
} metrale_device_info;

/* One kernel a backend instance can provide. */
typedef struct metrale_kernel_desc {
  const char* module;                     /* e.g. "w4a16" */
  const char* name;                       /* e.g. "w4a16_gemm_t" */
  const metrale_param_type* param_types;  /* parameter types in order; NULL when not stated */
  uint32_t param_count;                   /* entries in param_types */
} metrale_kernel_desc;

/* Shape of one launch, in cuLaunchKernel's terms. */
typedef struct metrale_launch_config {
  uint32_t grid[3];           /* blocks in x, y, z; each >= 1 */
  uint32_t block[3];          /* threads per block in x, y, z; each >= 1 */
  uint32_t shared_mem_bytes;  /* dynamic shared memory per block */
  uint64_t stream;            /* 0: the instance's default stream */
} metrale_launch_config;

/* The plugin's function table. Every instance entry point takes the instance first. */
typedef struct metrale_plugin_table {
  uint32_t struct_size;  /* sizeof(metrale_plugin_table) as the plugin was built */
  uint32_t abi_version;  /* the version negotiated; equals what the entry point answered */

  /* Fill *out with static facts. Required. */
  metrale_status (*describe)(metrale_plugin_info* out);
  /* Number of devices this plugin could drive here (0 is not an error). Required. */
  metrale_status (*device_count)(uint32_t* count, char* error, size_t error_size);
  /* Make an instance. On failure write a message into error (NUL-terminated, truncated to
   * error_size). UNAVAILABLE means "cannot run on this machine". Required. */
  metrale_status (*create)(const metrale_backend_create_info* info, metrale_backend** out,
                           char* error, size_t error_size);
  /* End an instance and free everything it owns. NULL is ignored. Required. */
  void (*destroy)(metrale_backend* backend);
  /* Message of the last failed call on this instance (thread-local where the plugin can).
   * Never NULL; "" when none. Required. */
  const char* (*last_error)(metrale_backend* backend);

  /* Describe the instance's device. Required. */
  metrale_status (*device_info)(metrale_backend* backend, metrale_device_info* out);
  /* Kernels this instance can provide right now. JIT backends list what their sources promise.
   * The array stays valid until destroy(). Required. */
  metrale_status (*list_kernels)(metrale_backend* backend, const metrale_kernel_desc** kernels,
                                 size_t* count);
  /* Resolve one kernel to a nonzero handle. NOT_FOUND when absent; JIT backends may compile
   * here and report a compile failure as INTERNAL with the compiler's log. Required. */
  metrale_status (*get_kernel)(metrale_backend* backend, const char* module, const char* name,
                               uint64_t* handle);

  /* Device memory. Addresses are 64-bit; 0 is never a valid allocation. Required. */
  metrale_status (*mem_alloc)(metrale_backend* backend, size_t bytes, uint64_t* device_ptr);
  metrale_status (*mem_free)(metrale_backend* backend, uint64_t device_ptr);
  /* Copies and memset are ordered on `stream` (0: default) and complete before the stream's
   * next synchronize. Required. */
  metrale_status (*copy_to_device)(metrale_backend* backend, uint64_t dst, const void* src,
                                   size_t bytes, uint64_t stream);
  metrale_status (*copy_to_host)(metrale_backend* backend, void* dst, uint64_t src, size_t bytes,
                                 uint64_t stream);
  metrale_status (*copy_device)(metrale_backend* backend, uint64_t dst, uint64_t src,
                                size_t bytes, uint64_t stream);
  metrale_status (*memset_device)(metrale_backend* backend, uint64_t dst, uint8_t value,
                                  size_t bytes, uint64_t stream);

  /* Streams. 0 is the default stream and is never created or destroyed. Required. */
  metrale_status (*stream_create)(metrale_backend* backend, uint64_t* stream);
  metrale_status (*stream_destroy)(metrale_backend* backend, uint64_t stream);
  metrale_status (*stream_synchronize)(metrale_backend* backend, uint64_t stream);

  /* Launch `kernel` with cuLaunchKernel's argument convention: args[i] points at the value of
   * parameter i. arg_count must equal the kernel's parameter count. Required. */
  metrale_status (*launch)(metrale_backend* backend, uint64_t kernel,
                           const metrale_launch_config* config, void* const* args,
                           size_t arg_count);

  /* ---- Appended after version 1: optional, read only when struct_size covers them. ---- */

  /* Optional (NULL: none). A plugin-specific extension entry point by name (the plugin documents
   * its names and their C types), or NULL for a name it does not offer. Callable from any thread
   * after the handshake, with or without an instance; must not throw. */
  void* (*get_proc_address)(const char* name);
} metrale_plugin_table;

/* The size of a version-1 table before anything was appended: the least struct_size accepted. */
#define METRALE_PLUGIN_TABLE_V1_SIZE offsetof(metrale_plugin_table, get_proc_address)

/* The entry point. The runtime offers [runtime_min, runtime_max]; the plugin writes the version
 * it speaks into *chosen (even when refusing, so the runtime can say which) and, on OK, its table
 * into *table (NULL otherwise). A plugin that speaks none of the offered versions returns
 * INCOMPATIBLE; a NULL out-pointer or runtime_min > runtime_max is INVALID_ARGUMENT.
 * metrale/plugin_glue.h has it as metrale_glue_handshake. */
typedef metrale_status (*metrale_plugin_entry_fn)(uint32_t runtime_min, uint32_t runtime_max,
                                                  uint32_t* chosen,
                                                  const metrale_plugin_table** table);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* METRALE_PLUGIN_ABI_H */
