// SPDX-License-Identifier: MIT OR Apache-2.0
// Backends from Python: kernels (try_kernel / kernel, each lookup an audit row annotated with the
// Python line that asked), device buffers exported through DLPack, and typed launches whose
// pointer arguments are buffers, host arrays (the CPU plugin's host-memory extension: no copy) or
// arrays of the backend's own device.
#include "bindings.hpp"

#include <metrale/audit.hpp>
#include <metrale/levers.hpp>
#include <metrale/lock.hpp>
#include <metrale/manifest.hpp>
#include <metrale/status.hpp>

#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <Python.h>

#include <array>
#include <limits>
#include <type_traits>

namespace metrale::python {

namespace {

struct PyKernel {
  std::shared_ptr<PyBackend> owner;
  KernelHandle handle;
  std::string module;
  std::string name;
  std::vector<KernelParam> params;
};

std::shared_ptr<PyKernel> lookup(const std::shared_ptr<PyBackend>& b, const std::string& module, const std::string& name,
                                 LookupKind kind) {
  Backend::LookupRequest request;
  request.kind = kind;
  if (std::string caller = python_caller(); !caller.empty()) request.annotations.push_back({"python", std::move(caller), false});
  const Backend::Resolution found = b->backend->resolve(module, name, request);
  if (!found) return nullptr;
  const auto params = b->backend->params(found.handle);
  return std::make_shared<PyKernel>(PyKernel{b, found.handle, module, name, {params.begin(), params.end()}});
}

template <class T>
T integer_argument(nb::handle value, const KernelParam& param, size_t index) {
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr()))
    throw Error(Status::invalid_argument, "argument " + std::to_string(index) + " (" + param.name + ": " +
                                              param_type_name(param.type) + ") must be an int, got " +
                                              text_of(value.type().attr("__name__")));
  // Through the widest C type of the same signedness, so any Python int is judged, not wrapped.
  bool fits = false;
  T result{};
  if constexpr (std::is_signed_v<T>) {
    int overflow = 0;
    const long long wide = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    fits = overflow == 0 && wide >= std::numeric_limits<T>::min() && wide <= std::numeric_limits<T>::max();
    result = static_cast<T>(wide);
  } else {
    const unsigned long long wide = PyLong_AsUnsignedLongLong(value.ptr());
    fits = !PyErr_Occurred() && wide <= std::numeric_limits<T>::max();
    result = static_cast<T>(wide);
  }
  PyErr_Clear();
  if (!fits)
    throw Error(Status::invalid_argument, "argument " + std::to_string(index) + " (" + param.name + ": " +
                                              param_type_name(param.type) + ") = " + text_of(value) +
                                              " is out of range [" + std::to_string(std::numeric_limits<T>::min()) +
                                              ", " + std::to_string(std::numeric_limits<T>::max()) + "]");
  return result;
}

// One launch, each argument converted to the type the manifest declares for it.
void launch(const PyBackend& b, const PyKernel& k, std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
            nb::sequence args, uint32_t shared_mem_bytes, uint64_t stream) {
  if (k.owner->backend != b.backend)
    throw Error(Status::invalid_argument, "launch: kernel " + k.module + "/" + k.name + " was resolved on backend " +
                                              k.owner->backend->name() + ", launched on " + b.backend->name());
  const PyKernel* kernel = &k;
  const size_t count = nb::len(args);
  if (count != kernel->params.size()) {
    std::string declared;
    for (const auto& p : kernel->params) declared += (declared.empty() ? "" : ", ") + p.name + ": " + param_type_name(p.type);
    throw Error(Status::invalid_argument, kernel->module + "/" + kernel->name + " takes " +
                                              std::to_string(kernel->params.size()) + " arguments (" + declared + "), got " +
                                              std::to_string(count));
  }
  // Values live here until the launch returns; the plugin reads them through `pointers`.
  union Value {
    uint64_t u64;
    int64_t i64;
    uint32_t u32;
    int32_t i32;
    float f32;
    double f64;
  };
  std::vector<Value> values(count);
  std::vector<metrale_param_type> types(count);
  std::vector<const void*> pointers(count);
  HostRegistrations host(b);
  for (size_t i = 0; i < count; ++i) {
    const KernelParam& param = kernel->params[i];
    const nb::handle arg = args[i];
    types[i] = param.type;
    Value& v = values[i];
    switch (param.type) {
      case METRALE_PARAM_PTR:
        if (nb::isinstance<PyBuffer>(arg)) {
          const PyBuffer& buffer = nb::cast<const PyBuffer&>(arg);
          if (buffer.owner->backend != b.backend)
            throw Error(Status::invalid_argument, "argument " + std::to_string(i) + " (" + param.name +
                                                      "): a buffer of backend " + buffer.owner->backend->name() +
                                                      ", launched on " + b.backend->name());
          v.u64 = buffer.ptr.address;
        } else if (PyLong_Check(arg.ptr())) {
          v.u64 = integer_argument<uint64_t>(arg, param, i);  // a device address as the caller has it
        } else {
          v.u64 = array_address(b, borrow_array(arg, "argument " + std::to_string(i) + " (" + param.name + ")"), host,
                                "argument " + std::to_string(i) + " (" + param.name + ")")
                      .address;
        }
        break;
      case METRALE_PARAM_U32: v.u32 = integer_argument<uint32_t>(arg, param, i); break;
      case METRALE_PARAM_I32: v.i32 = integer_argument<int32_t>(arg, param, i); break;
      case METRALE_PARAM_U64: v.u64 = integer_argument<uint64_t>(arg, param, i); break;
      case METRALE_PARAM_I64: v.i64 = integer_argument<int64_t>(arg, param, i); break;
      case METRALE_PARAM_F32: v.f32 = nb::cast<float>(arg); break;
      case METRALE_PARAM_F64: v.f64 = nb::cast<double>(arg); break;
      default:
        throw Error(Status::internal, "argument " + std::to_string(i) + " (" + param.name + "): parameter type " +
                                          std::to_string(static_cast<int>(param.type)) + " has no conversion");
    }
    pointers[i] = &v;
  }
  LaunchShape shape;
  shape.grid = grid;
  shape.block = block;
  shape.shared_mem_bytes = shared_mem_bytes;
  shape.stream = stream;
  {
    nb::gil_scoped_release release;
    b.backend->launch_packed(kernel->handle, shape, types, pointers);
    // Host arrays are registered for this call only: the launch must be done with them when it
    // returns (the CPU backend runs each operation to completion; this keeps any other honest).
    if (b.accepts_host_arrays()) b.backend->synchronize(stream);
  }
}

// dtype names of Buffer and their DLPack codes.
nb::dlpack::dtype dtype_from_name(const std::string& name) {
  using C = nb::dlpack::dtype_code;
  struct Known {
    const char* name;
    C code;
    uint8_t bits;
  };
  static constexpr Known known[] = {
      {"uint8", C::UInt, 8},     {"int8", C::Int, 8},       {"uint16", C::UInt, 16},    {"int16", C::Int, 16},
      {"uint32", C::UInt, 32},   {"int32", C::Int, 32},     {"uint64", C::UInt, 64},    {"int64", C::Int, 64},
      {"float16", C::Float, 16}, {"float32", C::Float, 32}, {"float64", C::Float, 64}, {"bfloat16", C::Bfloat, 16},
  };
  std::string names;
  for (const auto& k : known) {
    if (name == k.name) return {static_cast<uint8_t>(k.code), k.bits, 1};
    names += (names.empty() ? "" : ", ") + std::string(k.name);
  }
  throw Error(Status::invalid_argument, "dtype '" + name + "' is not one of " + names);
}

std::string dtype_name(nb::dlpack::dtype d) {
  using C = nb::dlpack::dtype_code;
  const std::string bits = std::to_string(d.bits);
  switch (static_cast<C>(d.code)) {
    case C::UInt: return "uint" + bits;
    case C::Int: return "int" + bits;
    case C::Float: return "float" + bits;
    case C::Bfloat: return "bfloat" + bits;
    default: return "code" + std::to_string(d.code) + "x" + bits;
  }
}

std::shared_ptr<PyBuffer> empty_buffer(const std::shared_ptr<PyBackend>& b, const std::vector<size_t>& shape,
                                       const std::string& dtype) {
  auto buffer = std::make_shared<PyBuffer>();
  buffer->dtype = dtype_from_name(dtype);
  buffer->shape = shape;
  size_t elements = 1;
  for (size_t extent : shape) elements *= extent;
  buffer->nbytes = elements * buffer->dtype.bits / 8;
  if (buffer->nbytes == 0) throw Error(Status::invalid_argument, "a buffer of shape with 0 elements holds nothing");
  buffer->ptr = b->backend->alloc(buffer->nbytes);
  buffer->owner = b;
  return buffer;
}

// A host array's bytes, checked against the buffer's size, for copies in and out.
nb::ndarray<nb::ro> host_array_for(const PyBuffer& buffer, nb::handle array, const char* what) {
  nb::ndarray<nb::ro> a = borrow_array(array, what);
  if (a.device_type() != nb::device::cpu::value)
    throw Error(Status::invalid_argument, std::string(what) + ": a host array is needed (this one is on DLPack device " +
                                              std::to_string(a.device_type()) + ")");
  if (a.nbytes() != buffer.nbytes)
    throw Error(Status::invalid_argument, std::string(what) + ": " + std::to_string(a.nbytes()) + " bytes, the buffer holds " +
                                              std::to_string(buffer.nbytes));
  return a;
}

// An ndarray without a framework becomes a DLPack capsule when cast to Python.
nb::object buffer_dlpack_capsule(nb::handle self) {
  const PyBuffer& buffer = nb::cast<const PyBuffer&>(self);
  const int device = buffer.owner->dlpack_device_type();
  if (device == 0)
    throw nb::buffer_error(("backend " + buffer.owner->backend->name() + "'s memory has no DLPack device type").c_str());
  // The Buffer object owns the memory: the exported array keeps it alive.
  nb::ndarray<> array(reinterpret_cast<void*>(buffer.ptr.address), buffer.shape.size(), buffer.shape.data(), self, nullptr,
                      buffer.dtype, device, buffer.owner->dlpack_device_id());
  return nb::cast(array);
}


void bind_kernel(nb::module_& m) {
  nb::class_<PyKernel>(m, "Kernel", "A resolved kernel of one backend (Backend.kernel / try_kernel).")
      .def_ro("module", &PyKernel::module)
      .def_ro("name", &PyKernel::name)
      .def_prop_ro("handle", [](const PyKernel& k) { return k.handle.value; })
      .def_prop_ro("params", [](const PyKernel& k) {
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& p : k.params) out.emplace_back(p.name, param_type_name(p.type));
        return out;
      }, "The manifest's parameters, (name, type) each: ptr, u32, i32, u64, i64, f32, f64.")
      .def("__repr__", [](const PyKernel& k) { return "<metrale.Kernel " + k.module + "/" + k.name + " on " + k.owner->backend->name() + ">"; });
}

void bind_buffer(nb::module_& m) {
  nb::class_<PyBuffer>(m, "Buffer", "Memory of one backend, freed with the object; DLPack exports it (torch.from_dlpack, numpy.from_dlpack).")
      .def_prop_ro("address", [](const PyBuffer& b) { return b.ptr.address; })
      .def_ro("nbytes", &PyBuffer::nbytes)
      .def_prop_ro("shape", [](const PyBuffer& b) { return nb::tuple(nb::cast(b.shape)); })
      .def_prop_ro("dtype", [](const PyBuffer& b) { return dtype_name(b.dtype); })
      .def_prop_ro("backend", [](const PyBuffer& b) { return b.owner->backend->name(); })
      .def("copy_from", [](PyBuffer& b, nb::handle array) {
        const nb::ndarray<nb::ro> a = host_array_for(b, array, "copy_from");
        b.owner->backend->copy_to_device(b.ptr, a.data(), b.nbytes);
        b.owner->backend->synchronize();
      }, nb::arg("array"), "Copies a host array of the same size in (waits).")
      .def("copy_to", [](const PyBuffer& b, nb::handle array) {
        const nb::ndarray<nb::ro> a = host_array_for(b, array, "copy_to");
        b.owner->backend->copy_to_host(const_cast<void*>(a.data()), b.ptr, b.nbytes);
        b.owner->backend->synchronize();
      }, nb::arg("array"), "Copies the buffer out into a writable host array of the same size (waits).")
      .def("__dlpack__", [](nb::handle self, nb::kwargs) { return buffer_dlpack_capsule(self); },
           "A DLPack capsule of the buffer (its memory, kept alive by it); stream and version requests are not needed: "
           "the CPU backend's work is done when a call returns, a CUDA buffer's after backend.synchronize().")
      .def("__dlpack_device__", [](const PyBuffer& b) {
        if (b.owner->dlpack_device_type() == 0)
          throw nb::buffer_error(("backend " + b.owner->backend->name() + "'s memory has no DLPack device type").c_str());
        return nb::make_tuple(b.owner->dlpack_device_type(), b.owner->dlpack_device_id());
      })
      .def("__repr__", [](const PyBuffer& b) {
        std::string shape;
        for (size_t e : b.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(e);
        return "<metrale.Buffer " + dtype_name(b.dtype) + "[" + shape + "] on " + b.owner->backend->name() + ">";
      });
}

void bind_backend_facts(nb::class_<PyBackend>& backend) {
  backend
      .def_prop_ro("name", [](const PyBackend& b) { return b.backend->name(); })
      .def_prop_ro("target", [](const PyBackend& b) { return b.backend->target(); })
      .def_prop_ro("device_name", [](const PyBackend& b) { return b.backend->device_name(); })
      .def_prop_ro("memory_bytes", [](const PyBackend& b) { return b.backend->memory_bytes(); })
      .def_prop_ro("compute_units", [](const PyBackend& b) { return b.backend->compute_units(); })
      .def_prop_ro("plugin_version", [](const PyBackend& b) { return b.backend->plugin_version(); })
      .def_prop_ro("manifest", [](const PyBackend& b) { return b.backend->manifest().path.string(); })
      .def_prop_ro("library", [](const PyBackend& b) { return b.backend->manifest().library.string(); })
      .def_prop_ro("accepts_host_arrays", &PyBackend::accepts_host_arrays,
                   "Whether host arrays (numpy, torch CPU tensors) reach its kernels without a copy (the CPU backend).");
}

void bind_backend_kernels(nb::class_<PyBackend>& backend) {
  backend
      .def("kernels", [](const PyBackend& b) {
        nb::list out;
        for (const auto& k : b.backend->kernel_availability()) {
          nb::dict d;
          d["module"] = k.module;
          d["name"] = k.name;
          d["listed"] = k.listed;
          d["provided"] = k.provided;
          d["gated"] = k.gated;
          d["note"] = k.note;
          out.append(d);
        }
        return out;
      }, "Every kernel the manifest or the plugin names: listed, provided, gated by target, and why (`metrale kernels`).")
      .def("try_kernel", [](const std::shared_ptr<PyBackend>& b, const std::string& module, const std::string& name) {
        return lookup(b, module, name, LookupKind::try_lookup);
      }, nb::arg("module"), nb::arg("name"), "The kernel, or None when this backend cannot run it (the audit row says why).")
      .def("kernel", [](const std::shared_ptr<PyBackend>& b, const std::string& module, const std::string& name) {
        return lookup(b, module, name, LookupKind::require);
      }, nb::arg("module"), nb::arg("name"), "The kernel; raises metrale.Error naming module, name and why when absent.");
}

void bind_backend_memory(nb::class_<PyBackend>& backend) {
  backend
      .def("empty", &empty_buffer, nb::arg("shape"), nb::arg("dtype") = "uint8", "Allocates a buffer (contents undefined).")
      .def("to_device", [](const std::shared_ptr<PyBackend>& b, nb::handle array) {
        const nb::ndarray<nb::ro> a = borrow_array(array, "to_device");
        if (a.device_type() != nb::device::cpu::value) throw Error(Status::invalid_argument, "to_device: a host array is needed");
        std::vector<size_t> shape;
        for (size_t i = 0; i < a.ndim(); ++i) shape.push_back(a.shape(i));
        if (shape.empty()) shape.push_back(1);
        // An ml_dtypes bfloat16 array arrives as its uint16 bits: the buffer says bfloat16 again.
        const bool bf16 = nb::hasattr(array, "dtype") && text_of(array.attr("dtype")) == "bfloat16";
        auto buffer = empty_buffer(b, shape, bf16 ? "bfloat16" : dtype_name(a.dtype()));
        b->backend->copy_to_device(buffer->ptr, a.data(), buffer->nbytes);
        b->backend->synchronize();
        return buffer;
      }, nb::arg("array"), "A new buffer holding a copy of a host array (its shape and dtype).")
      .def("launch", &launch, nb::arg("kernel"), nb::arg("grid"), nb::arg("block"), nb::arg("args"),
           nb::arg("shared_mem_bytes") = 0, nb::arg("stream") = 0,
           "Launches with arguments of the manifest's types: buffers, host arrays (a backend that takes them) or device "
           "addresses for ptr; ints for u32/i32/u64/i64; floats for f32/f64. Range and count are checked.")
      .def("synchronize", [](const PyBackend& b, uint64_t stream) {
        nb::gil_scoped_release release;
        b.backend->synchronize(stream);
      }, nb::arg("stream") = 0)
      .def("stream_create", [](const PyBackend& b) { return b.backend->stream_create(); })
      .def("stream_destroy", [](const PyBackend& b, uint64_t stream) { b.backend->stream_destroy(stream); }, nb::arg("stream"));
}

void bind_backend_audit(nb::class_<PyBackend>& backend) {
  backend
      .def("audit", [](const PyBackend& b) { return rows_to_python(b.backend->audit().snapshot()); },
           "The process's audit rows (every backend's lookups), as dicts.")
      .def("write_lock", [](const PyBackend& b, const std::string& path, nb::handle rows) {
        write_lock(path, *b.backend, rows_from_python(rows));
      }, nb::arg("path"), nb::arg("rows"), "Writes a lock of these audit rows, all taken on this backend.")
      .def("enforce_lock", [](const PyBackend& b, nb::handle rows) { enforce_lock(*b.backend, rows_from_python(rows)); },
           nb::arg("rows"), "With METRALE_LOCK set: raises metrale.Refusal listing each difference from the lock.")
      .def("__repr__", [](const PyBackend& b) {
        return "<metrale.Backend " + b.backend->name() + " target=" + b.backend->target() + " device=" + b.backend->device_name() + ">";
      });
}

}  // namespace

PyBackend::PyBackend(const Registry& registry, std::shared_ptr<Backend> selected) : backend(std::move(selected)) {
  try {
    host_register_ext = registry.extension(backend->name(), METRALE_CPU_HOST_REGISTER_NAME);
    host_unregister_ext = registry.extension(backend->name(), METRALE_CPU_HOST_UNREGISTER_NAME);
  } catch (const Error&) {
    host_register_ext = {};  // this backend takes only its own memory (and a device's arrays by address)
    host_unregister_ext = {};
  }
}

int PyBackend::dlpack_device_type() const {
  if (backend->name() == "cpu") return nb::device::cpu::value;
  if (backend->name() == "cuda") return nb::device::cuda::value;
  return 0;
}

int PyBackend::dlpack_device_id() const {
  // The CUDA backend runs on the device its manifest's lever names (METRALE_CUDA_DEVICE, default 0).
  if (backend->name() == "cuda") return static_cast<int>(lever_u32("METRALE_CUDA_DEVICE").value_or(0));
  return 0;
}

PyBuffer::~PyBuffer() {
  if (owner && ptr) {
    try {
      owner->backend->free(ptr);
    } catch (const Error&) {
      // A backend that refuses its own free has said why in its log; a destructor cannot raise.
    }
  }
}

nb::ndarray<nb::ro> borrow_array(nb::handle object, const std::string& what) {
  nb::handle source = object;
  nb::object bits;
  // ml_dtypes' bfloat16 (numpy dtype "bfloat16"; torch's prints "torch.bfloat16" and has a DLPack
  // code) exports through neither DLPack nor the buffer protocol: its uint16 view, same memory, does.
  if (nb::hasattr(object, "dtype") && nb::hasattr(object, "view") &&
      text_of(object.attr("dtype")) == "bfloat16") {
    bits = object.attr("view")("uint16");
    source = bits;
  }
  nb::ndarray<nb::ro> array;
  if (!nb::try_cast(source, array, false))
    throw Error(Status::invalid_argument, what + ": expected an array (DLPack or the buffer protocol: numpy, torch, CuPy), got " +
                                              text_of(object.type().attr("__name__")));
  // C order: each stride is the product of the extents after it (extents of 1 do not count).
  int64_t expected = 1;
  for (size_t i = array.ndim(); i-- > 0;) {
    if (array.shape(i) != 1 && array.stride(i) != expected)
      throw Error(Status::invalid_argument, what + ": the array is not C-contiguous (make it so: numpy.ascontiguousarray, "
                                                   "tensor.contiguous())");
    expected *= static_cast<int64_t>(array.shape(i));
  }
  return array;
}

bool holds_bf16(const nb::ndarray<nb::ro>& array) {
  const nb::dlpack::dtype d = array.dtype();
  return d.bits == 16 && d.lanes == 1 &&
         (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) || d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::UInt));
}

HostRegistrations::~HostRegistrations() {
  const auto unregister = backend_.host_unregister_ext.as<metrale_cpu_host_unregister_fn>();
  for (uint64_t address : registered_) unregister(backend_.backend->instance(), address);
}

DevicePtr HostRegistrations::add(const void* data, size_t bytes, const std::string& what) {
  if (!backend_.accepts_host_arrays())
    throw Error(Status::invalid_argument, what + ": backend " + backend_.backend->name() +
                                              " does not take host arrays: copy it into a buffer (backend.to_device)");
  const auto register_host = backend_.host_register_ext.as<metrale_cpu_host_register_fn>();
  uint64_t address = 0;
  uint32_t registered = 0;
  if (register_host(backend_.backend->instance(), data, bytes, &address, &registered) != METRALE_STATUS_OK)
    throw Error(Status::invalid_argument,
                what + ": " + backend_.backend->table().last_error(backend_.backend->instance()));
  if (registered) registered_.push_back(address);
  return {address};
}

DevicePtr array_address(const PyBackend& backend, const nb::ndarray<nb::ro>& array, HostRegistrations& host,
                        const std::string& what) {
  const void* data = array.data();
  const size_t bytes = array.nbytes();
  if (bytes == 0) throw Error(Status::invalid_argument, what + ": the array holds no element");
  if (array.device_type() == nb::device::cpu::value) return host.add(data, bytes, what);
  if (array.device_type() == backend.dlpack_device_type() && array.device_id() == backend.dlpack_device_id())
    return {reinterpret_cast<uint64_t>(data)};
  throw Error(Status::invalid_argument, what + ": an array on DLPack device " + std::to_string(array.device_type()) + ":" +
                                            std::to_string(array.device_id()) + ", backend " + backend.backend->name() +
                                            " runs on " + std::to_string(backend.dlpack_device_type()) + ":" +
                                            std::to_string(backend.dlpack_device_id()));
}

void bind_backend(nb::module_& m) {
  bind_kernel(m);
  bind_buffer(m);
  nb::class_<PyBackend> backend(m, "Backend", "One loaded backend (Runtime.select / find / backends).");
  bind_backend_facts(backend);
  bind_backend_kernels(backend);
  bind_backend_memory(backend);
  bind_backend_audit(backend);
}

}  // namespace metrale::python
