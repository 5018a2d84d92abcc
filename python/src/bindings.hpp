// SPDX-License-Identifier: MIT OR Apache-2.0
// What the parts of the extension (runtime.cpp: errors, the registry, audit rows, locks, levers;
// backend.cpp: kernels, buffers, launches; layers.cpp: the embedded FFN and the bench) share: the Python-side wrappers of a
// Backend and a device Buffer, and how Python arrays become the bf16 rows the layers take.
// docs/python.md is the API; the Python half of the package (python/metrale/__init__.py) wraps
// what is here in the names it documents.
#pragma once

#include <metrale/audit.hpp>
#include <metrale/backend.hpp>
#include <metrale/cpu_host_memory.h>
#include <metrale/registry.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace metrale::python {

namespace nb = nanobind;

// A backend as Python holds it: the runtime's shared Backend, and the CPU plugin's host-memory
// extension when the backend offers it (runtime/abi/metrale/cpu_host_memory.h), through which
// host arrays reach its kernels without a copy.
struct PyBackend {
  std::shared_ptr<Backend> backend;
  Extension host_register_ext;    // address null: host arrays are not accepted
  Extension host_unregister_ext;

  PyBackend(const Registry& registry, std::shared_ptr<Backend> selected);
  bool accepts_host_arrays() const noexcept { return host_register_ext.address != nullptr; }
  // The DLPack device type and id of this backend's memory (cpu: kDLCPU; cuda: kDLCUDA on its
  // device); 0 when it has none DLPack names.
  int dlpack_device_type() const;
  int dlpack_device_id() const;
};

// The Registry a Python program holds; its backends come out as PyBackends sharing it.
struct PyRuntime {
  Registry registry;
  std::shared_ptr<PyBackend> wrap(std::shared_ptr<Backend> backend) const {
    return backend ? std::make_shared<PyBackend>(registry, std::move(backend)) : nullptr;
  }
};

// Memory of one backend, owned (freed with the Buffer), typed for DLPack.
struct PyBuffer {
  std::shared_ptr<PyBackend> owner;
  DevicePtr ptr;
  size_t nbytes = 0;
  std::vector<size_t> shape;
  nb::dlpack::dtype dtype;
  ~PyBuffer();
};

// An array argument without a copy: anything DLPack or the buffer protocol exports (numpy, torch,
// CuPy), an ml_dtypes bfloat16 array seen as its uint16 bits. Throws Error(invalid_argument)
// naming `what` when the object is none of these or is not C-contiguous.
nb::ndarray<nb::ro> borrow_array(nb::handle object, const std::string& what);
// Whether an array holds bf16 values: DLPack bfloat16 or 16-bit unsigned bit patterns.
bool holds_bf16(const nb::ndarray<nb::ro>& array);

// The host's part of the CPU backend for the duration of one call: each host array registered
// (cpu_host_memory.h) on construction, unregistered on destruction.
class HostRegistrations {
 public:
  explicit HostRegistrations(const PyBackend& backend) : backend_(backend) {}
  ~HostRegistrations();
  HostRegistrations(const HostRegistrations&) = delete;
  HostRegistrations& operator=(const HostRegistrations&) = delete;
  // The device address of a host array's bytes (registered when not inside live memory already).
  DevicePtr add(const void* data, size_t bytes, const std::string& what);

 private:
  const PyBackend& backend_;
  std::vector<uint64_t> registered_;
};

// A device address for an array argument: a host array on a backend that takes host memory, or
// memory of the backend's own device (a torch CUDA tensor on the CUDA backend's device).
DevicePtr array_address(const PyBackend& backend, const nb::ndarray<nb::ro>& array, HostRegistrations& host,
                        const std::string& what);

// "file.py:12" of the Python code that called into the extension, for the audit row of a lookup.
std::string python_caller();
// A JSON-able Python value (json.dumps) as nlohmann::json.
nlohmann::json python_to_json(nb::handle value);
// Audit rows to and from the dicts Python holds: render_audit_json's fields, validated on the way in
// (validate_resolutions) and read back into AuditRows for locks and the CLI's renderings.
nb::object rows_to_python(const std::vector<AuditRow>& rows);
std::vector<AuditRow> rows_from_python(nb::handle rows);

// str(object), as Python prints it.
inline std::string text_of(nb::handle object) { return nb::cast<std::string>(nb::steal<nb::str>(PyObject_Str(object.ptr()))); }

void bind_runtime(nb::module_& m);
void bind_backend(nb::module_& m);
void bind_layers(nb::module_& m);

}  // namespace metrale::python
