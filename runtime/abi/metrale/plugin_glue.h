/* SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * metrale plugin glue: optional helpers for the C boilerplate every plugin repeats around
 * plugin_abi.h (docs/plugin-abi.md, "The glue header"). Plain C11 (GCC or Clang), usable from C
 * and C++; everything is static inline, so it links into the plugin and nothing crosses the ABI.
 *
 *   metrale_glue_write_error / _format_error   bounded copy of a message into a caller's buffer
 *   metrale_glue_error_slot                     an instance's last error, kept per thread
 *   metrale_glue_handshake, METRALE_GLUE_DEFINE_ENTRY   the version handshake
 *   metrale_glue_check_launch                   the launch checks that do not depend on the kernel
 *   metrale_glue_table                          a locked set of live allocations or stream ids
 *   metrale_glue_guard (C++ only)               any exception -> a status and a message
 *
 * The last-error slots and the tables use POSIX threads; the error text lives in thread-local
 * storage of the translation unit that includes this header, so call a slot's functions from one
 * translation unit (the one with the function table).
 */
#ifndef METRALE_PLUGIN_GLUE_H
#define METRALE_PLUGIN_GLUE_H

#include <metrale/plugin_abi.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
#define METRALE_GLUE_THREAD_LOCAL thread_local
#define METRALE_GLUE_EXTERN_C extern "C"
extern "C" {
#else
#define METRALE_GLUE_THREAD_LOCAL _Thread_local
#define METRALE_GLUE_EXTERN_C
#endif

#if defined(__GNUC__)
#define METRALE_GLUE_PRINTF(format_index, first_arg) __attribute__((format(printf, format_index, first_arg)))
#else
#define METRALE_GLUE_PRINTF(format_index, first_arg)
#endif

/* ---- Error buffers -------------------------------------------------------------------------- */

/* Copies `message` into buffer[size]: NUL-terminated, truncated to size - 1 bytes. A NULL buffer
 * or size 0 writes nothing; a NULL message writes "". For device_count() and create(). */
static inline void metrale_glue_write_error(char* buffer, size_t size, const char* message) {
  size_t length;
  if (buffer == NULL || size == 0) return;
  if (message == NULL) message = "";
  length = strlen(message);
  if (length > size - 1) length = size - 1;
  memcpy(buffer, message, length);
  buffer[length] = '\0';
}

/* The same with a printf format. */
static inline METRALE_GLUE_PRINTF(3, 4) void metrale_glue_format_error(char* buffer, size_t size,
                                                                       const char* format, ...) {
  va_list args;
  if (buffer == NULL || size == 0) return;
  va_start(args, format);
  vsnprintf(buffer, size, format, args);
  va_end(args);
}

/* ---- Last error ----------------------------------------------------------------------------- */

/* Longest message a slot keeps (longer ones are truncated), and how many instances' messages one
 * thread remembers at once (the oldest is dropped). */
#define METRALE_GLUE_ERROR_CAPACITY 1024
#define METRALE_GLUE_ERROR_RECORDS 4

/* Put one in the instance (metrale_glue_error_init at create()). The text itself is per thread:
 * last_error() answers the calling thread's last failure on this instance, "" when none. */
typedef struct metrale_glue_error_slot {
  uint64_t id; /* unique per initialised slot, never reused: a new instance starts clean */
} metrale_glue_error_slot;

typedef struct metrale_glue_error_record {
  uint64_t owner;
  char text[METRALE_GLUE_ERROR_CAPACITY];
} metrale_glue_error_record;

static inline metrale_glue_error_record* metrale_glue_error_records_(unsigned** next) {
  static METRALE_GLUE_THREAD_LOCAL metrale_glue_error_record records[METRALE_GLUE_ERROR_RECORDS];
  static METRALE_GLUE_THREAD_LOCAL unsigned next_record;
  if (next != NULL) *next = &next_record;
  return records;
}

static inline void metrale_glue_error_init(metrale_glue_error_slot* slot) {
  static uint64_t last_id;
  slot->id = __atomic_add_fetch(&last_id, 1, __ATOMIC_RELAXED);
}

/* Records the message for the calling thread and returns `status`, so a failing entry point
 * ends with `return metrale_glue_fail(&b->error, METRALE_STATUS_NOT_FOUND, "...", ...);`. */
static inline METRALE_GLUE_PRINTF(3, 4) metrale_status metrale_glue_fail(metrale_glue_error_slot* slot,
                                                                         metrale_status status,
                                                                         const char* format, ...) {
  unsigned* next = NULL;
  metrale_glue_error_record* records = metrale_glue_error_records_(&next);
  metrale_glue_error_record* record = NULL;
  va_list args;
  unsigned i;
  for (i = 0; i < METRALE_GLUE_ERROR_RECORDS && record == NULL; ++i)
    if (records[i].owner == slot->id) record = &records[i];
  if (record == NULL) {
    record = &records[*next % METRALE_GLUE_ERROR_RECORDS];
    *next += 1;
    record->owner = slot->id;
  }
  va_start(args, format);
  vsnprintf(record->text, sizeof record->text, format, args);
  va_end(args);
  return status;
}

/* The calling thread's last message on this slot's instance; never NULL. */
static inline const char* metrale_glue_last_error(const metrale_glue_error_slot* slot) {
  const metrale_glue_error_record* records = metrale_glue_error_records_(NULL);
  unsigned i;
  if (slot == NULL) return "";
  for (i = 0; i < METRALE_GLUE_ERROR_RECORDS; ++i)
    if (records[i].owner == slot->id) return records[i].text;
  return "";
}

/* ---- Handshake ------------------------------------------------------------------------------ */

/* The entry point's whole job for a plugin that speaks one ABI version, `version` (a literal the
 * table was written for, never METRALE_ABI_VERSION of whatever header is at hand): writes it into
 * *chosen whatever the outcome, sets *table to NULL unless answering OK, INVALID_ARGUMENT for a
 * NULL out-pointer or runtime_min > runtime_max, INCOMPATIBLE when the range misses `version`. */
static inline metrale_status metrale_glue_handshake(uint32_t version, const metrale_plugin_table* own,
                                                    uint32_t runtime_min, uint32_t runtime_max,
                                                    uint32_t* chosen, const metrale_plugin_table** table) {
  if (chosen != NULL) *chosen = version;
  if (table != NULL) *table = NULL;
  if (chosen == NULL || table == NULL || runtime_min > runtime_max) return METRALE_STATUS_INVALID_ARGUMENT;
  if (runtime_min > version || runtime_max < version) return METRALE_STATUS_INCOMPATIBLE;
  *table = own;
  return METRALE_STATUS_OK;
}

/* Defines the exported metrale_plugin_entry around metrale_glue_handshake (at file scope). */
#define METRALE_GLUE_DEFINE_ENTRY(version, table_address)                                                   \
  METRALE_GLUE_EXTERN_C METRALE_PLUGIN_EXPORT metrale_status metrale_plugin_entry(                          \
      uint32_t runtime_min, uint32_t runtime_max, uint32_t* chosen, const metrale_plugin_table** table) { \
    return metrale_glue_handshake((version), (table_address), runtime_min, runtime_max, chosen, table);  \
  }

/* ---- Launch --------------------------------------------------------------------------------- */

/* The checks of launch() that come before anything specific to the kernel: a config, arg_count
 * equal to the kernel's parameter count, an argument array with no NULL entry, every grid and
 * block dimension >= 1. OK, or INVALID_ARGUMENT with the reason in message[size]. The kernel
 * handle and the stream are the plugin's to check. */
static inline metrale_status metrale_glue_check_launch(const metrale_launch_config* config, void* const* args,
                                                       size_t arg_count, uint32_t param_count, char* message,
                                                       size_t size) {
  size_t i;
  if (config == NULL) {
    metrale_glue_write_error(message, size, "the launch config is NULL");
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
  if (arg_count != param_count) {
    metrale_glue_format_error(message, size, "the kernel takes %u arguments, got %zu", param_count, arg_count);
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
  for (i = 0; i < arg_count; ++i) {
    if (args == NULL || args[i] == NULL) {
      metrale_glue_format_error(message, size, "argument %zu points to NULL", i);
      return METRALE_STATUS_INVALID_ARGUMENT;
    }
  }
  for (i = 0; i < 3; ++i) {
    if (config->grid[i] == 0 || config->block[i] == 0) {
      metrale_glue_format_error(message, size, "grid (%u, %u, %u) and block (%u, %u, %u) must be >= 1 in every dimension",
                                config->grid[0], config->grid[1], config->grid[2], config->block[0],
                                config->block[1], config->block[2]);
      return METRALE_STATUS_INVALID_ARGUMENT;
    }
  }
  return METRALE_STATUS_OK;
}

/* ---- Live allocations and streams ----------------------------------------------------------- */

typedef struct metrale_glue_range {
  uint64_t start;
  uint64_t size;
} metrale_glue_range;

/* A locked set of ranges [start, start + size): an instance's live allocations (address, bytes),
 * or its streams (id, 1). What the contract's NOT_FOUND and INVALID_ARGUMENT answers need. */
typedef struct metrale_glue_table {
  pthread_mutex_t lock;
  metrale_glue_range* items;
  size_t count;
  size_t capacity;
  uint64_t next_id; /* for ids handed out by metrale_glue_table_new_id (starts at 1) */
} metrale_glue_table;

static inline void metrale_glue_table_init(metrale_glue_table* t) {
  pthread_mutex_init(&t->lock, NULL);
  t->items = NULL;
  t->count = t->capacity = 0;
  t->next_id = 1;
}

/* Frees the table's own storage; what the ranges stand for is the caller's to release first. */
static inline void metrale_glue_table_destroy(metrale_glue_table* t) {
  free(t->items);
  t->items = NULL;
  t->count = t->capacity = 0;
  pthread_mutex_destroy(&t->lock);
}

/* Adds a range; 0 when out of memory. */
static inline int metrale_glue_table_add(metrale_glue_table* t, uint64_t start, uint64_t size) {
  int added = 1;
  pthread_mutex_lock(&t->lock);
  if (t->count == t->capacity) {
    const size_t capacity = t->capacity ? 2 * t->capacity : 16;
    metrale_glue_range* items = (metrale_glue_range*)realloc(t->items, capacity * sizeof *items);
    if (items == NULL) {
      added = 0;
    } else {
      t->items = items;
      t->capacity = capacity;
    }
  }
  if (added) {
    t->items[t->count].start = start;
    t->items[t->count].size = size;
    t->count += 1;
  }
  pthread_mutex_unlock(&t->lock);
  return added;
}

/* Removes the range starting exactly at `start`; 1 when there was one, else 0. */
static inline int metrale_glue_table_remove(metrale_glue_table* t, uint64_t start) {
  int removed = 0;
  size_t i;
  pthread_mutex_lock(&t->lock);
  for (i = 0; i < t->count && !removed; ++i) {
    if (t->items[i].start == start) {
      t->items[i] = t->items[t->count - 1];
      t->count -= 1;
      removed = 1;
    }
  }
  pthread_mutex_unlock(&t->lock);
  return removed;
}

/* 1 when [address, address + size) lies inside one range (a stream id: size 1), else 0. */
static inline int metrale_glue_table_covers(metrale_glue_table* t, uint64_t address, uint64_t size) {
  int covered = 0;
  size_t i;
  pthread_mutex_lock(&t->lock);
  for (i = 0; i < t->count && !covered; ++i) {
    const metrale_glue_range r = t->items[i];
    covered = address >= r.start && address - r.start <= r.size && size <= r.size - (address - r.start);
  }
  pthread_mutex_unlock(&t->lock);
  return covered;
}

/* A fresh nonzero id (stream ids): 1, 2, 3, ... */
static inline uint64_t metrale_glue_table_new_id(metrale_glue_table* t) {
  uint64_t id;
  pthread_mutex_lock(&t->lock);
  id = t->next_id++;
  pthread_mutex_unlock(&t->lock);
  return id;
}

#ifdef __cplusplus
} /* extern "C" */

#include <exception>
#include <new>

/* Runs `body` (returning a metrale_status) and turns anything it throws into a status and a
 * message handed to `report(status, message)`, which records it and returns the status to
 * answer: bad_alloc -> OUT_OF_MEMORY, any other exception -> INTERNAL. Should `report` itself
 * throw, the status alone is answered. No exception leaves. */
template <class Report, class Body>
inline metrale_status metrale_glue_guard(Report&& report, Body&& body) noexcept {
  metrale_status status = METRALE_STATUS_INTERNAL;
  const char* message = "unknown exception";
  try {
    return body();
  } catch (const std::bad_alloc&) {
    status = METRALE_STATUS_OUT_OF_MEMORY;
    message = "out of host memory";
  } catch (const std::exception& e) {
    try {
      return report(METRALE_STATUS_INTERNAL, e.what());
    } catch (...) {
      return METRALE_STATUS_INTERNAL;
    }
  } catch (...) {
  }
  try {
    return report(status, message);
  } catch (...) {
    return status;
  }
}

/* The same, recording "what: message" in an error slot. */
template <class Body>
inline metrale_status metrale_glue_guard(metrale_glue_error_slot* slot, const char* what, Body&& body) noexcept {
  return metrale_glue_guard(
      [&](metrale_status status, const char* message) { return metrale_glue_fail(slot, status, "%s: %s", what, message); },
      static_cast<Body&&>(body));
}
#endif /* __cplusplus */

#endif /* METRALE_PLUGIN_GLUE_H */
