/* SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * An extension of the CPU plugin (libmetrale_cpu.so): host memory the caller owns, accepted by the
 * instance's copies and launches as if it were one of its allocations, so a program's own arrays
 * (a numpy array, a torch CPU tensor: docs/python.md) reach a kernel without a copy. The plugin
 * exports no symbol for it: its table's get_proc_address answers METRALE_CPU_HOST_REGISTER_NAME
 * with a metrale_cpu_host_register_fn and METRALE_CPU_HOST_UNREGISTER_NAME with a
 * metrale_cpu_host_unregister_fn, reached through the runtime's registry (Registry::extension).
 *
 * The CPU backend runs every operation to completion before the call returns, so memory registered
 * around one launch may be unregistered as soon as the launch returns. The caller keeps the memory
 * alive while it is registered; unregistering never frees it, and mem_free refuses it.
 */
#ifndef METRALE_CPU_HOST_MEMORY_H
#define METRALE_CPU_HOST_MEMORY_H

#include <metrale/plugin_abi.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Names for metrale_plugin_table.get_proc_address. */
#define METRALE_CPU_HOST_REGISTER_NAME "metrale_cpu_host_register"
#define METRALE_CPU_HOST_UNREGISTER_NAME "metrale_cpu_host_unregister"

/* Makes [host, host + bytes) usable as device memory of `backend`; *device_ptr receives its device
 * address (the host address: the CPU backend's memory is host memory). When the range already lies
 * inside one live allocation or registration, nothing is registered and *registered is 0; else
 * *registered is 1 and the range must be unregistered. A range that overlaps live memory only in
 * part, a NULL pointer or 0 bytes: INVALID_ARGUMENT (last_error names the ranges). */
typedef metrale_status (*metrale_cpu_host_register_fn)(metrale_backend* backend, const void* host, size_t bytes,
                                                       uint64_t* device_ptr, uint32_t* registered);
/* Forgets a registration (its device address); the memory stays the caller's. Anything else is
 * NOT_FOUND. */
typedef metrale_status (*metrale_cpu_host_unregister_fn)(metrale_backend* backend, uint64_t device_ptr);

#ifdef __cplusplus
}
#endif

#endif /* METRALE_CPU_HOST_MEMORY_H */
