// SPDX-License-Identifier: MIT OR Apache-2.0
#include "instance.hpp"

#include <fstream>
#include <sstream>

namespace metrale::cuda {
namespace {

namespace fs = std::filesystem;

std::string names_of_modules(const Catalog& catalog) {
  std::string out;
  for (const auto& m : catalog.modules()) out += (out.empty() ? "" : ", ") + m.name;
  return out.empty() ? "none" : out;
}

std::string names_of_kernels(const CatalogModule& module) {
  std::string out;
  for (const auto& k : module.kernels) out += (out.empty() ? "" : ", ") + k.name;
  return out.empty() ? "none" : out;
}

std::string gib(uint64_t bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0) << " GiB";
  return out.str();
}

// The "driver" option names the libcuda to load; other options are logged and ignored.
std::string driver_path_from_options(const metrale_backend_create_info& info, const HostLog& log) {
  std::string driver_path = kDefaultDriver;
  for (uint32_t i = 0; i < info.option_count && info.options != nullptr; ++i) {
    const metrale_option& option = info.options[i];
    if (option.key == nullptr || option.value == nullptr) {
      throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "option " + std::to_string(i) + " has a null key or value");
    }
    const std::string key = option.key;
    if (key == "driver") {
      if (*option.value != '\0') driver_path = option.value;
    } else {
      log.debug(std::string("ignoring unknown option ") + key + "=" + option.value);
    }
  }
  return driver_path;
}

std::string manifest_text_of(const metrale_backend_create_info& info) {
  if (info.manifest_json != nullptr) return info.manifest_json;
  if (info.manifest_path == nullptr) {
    throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "create_info has neither manifest_json nor manifest_path");
  }
  std::ifstream in(info.manifest_path, std::ios::binary);
  if (!in) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, std::string("cannot read manifest ") + info.manifest_path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Failures while opening the device are reported with the call and the error name. A device
// that exists but cannot be opened (exclusive mode, a broken driver) makes the backend
// unavailable here, which is what the runtime tells the user; out of memory stays that.
void check_device_setup(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  metrale_status status = status_for(result);
  if (status != METRALE_STATUS_OUT_OF_MEMORY) status = METRALE_STATUS_UNAVAILABLE;
  throw PluginError(status, std::string(call) + " failed: " + cuda_error_name(result) + " (" +
                                std::to_string(static_cast<int>(result)) + ")");
}

ModuleCompiler::Settings compiler_settings(const metrale_backend_create_info& info, const HostLog& log) {
  ModuleCompiler::Settings settings;
  for (uint32_t i = 0; i < info.kernel_source_dir_count && info.kernel_source_dirs != nullptr; ++i) {
    if (info.kernel_source_dirs[i] != nullptr) settings.source_dirs.emplace_back(info.kernel_source_dirs[i]);
  }
  if (info.cache_dir != nullptr && *info.cache_dir != '\0') settings.cache_dir = fs::path(info.cache_dir);
  settings.log = log;
  return settings;
}

}  // namespace

Instance::Instance(const metrale_backend_create_info& info) : device_index_(info.device_index) {
  if (info.host != nullptr) log_ = HostLog(info.host->log, info.host->user);
  const std::string driver_path = driver_path_from_options(info, log_);

  // The manifest first: a bad one is the caller's problem whatever the machine has.
  catalog_ = Catalog::parse(manifest_text_of(info), info.manifest_path ? info.manifest_path : "manifest");

  driver_ = Driver::load(driver_path);
  open_device(driver_path);

  compiler_ = std::make_unique<ModuleCompiler>(compiler_settings(info, log_));
  for (const auto& module : catalog_.modules()) {
    auto state = std::make_unique<ModuleState>();
    state->spec = &module;
    modules_.emplace(module.name, std::move(state));
  }

  const Driver& d = *driver_;
  std::string dirs;
  for (const auto& dir : compiler_->source_dirs()) dirs += (dirs.empty() ? "" : ":") + dir.string();
  log_.info("CUDA device " + std::to_string(device_index_) + ": " + device_name_ + " (" + target_text_ + ", " +
            std::to_string(sm_count_) + " SMs, " + gib(memory_bytes_) + "), driver " + driver_path + " " +
            std::to_string(d.version() / 1000) + "." + std::to_string(d.version() % 1000 / 10) +
            ", kernel sources " + (dirs.empty() ? "(none)" : dirs) + ", compile cache " +
            (info.cache_dir && *info.cache_dir ? info.cache_dir : "off"));
}

void Instance::open_device(const std::string& driver_path) {
  const Driver& d = *driver_;
  const auto setup = check_device_setup;
  int count = 0;
  setup(d.cuDeviceGetCount(&count), METRALE_CU_SYMBOL(cuDeviceGetCount));
  if (count <= 0) throw PluginError(METRALE_STATUS_UNAVAILABLE, "the CUDA driver (" + driver_path + ") reports no device");
  if (device_index_ >= static_cast<uint32_t>(count)) {
    throw PluginError(METRALE_STATUS_NOT_FOUND, "CUDA device " + std::to_string(device_index_) + " requested; " +
                                                    std::to_string(count) + " present");
  }
  setup(d.cuDeviceGet(&device_, static_cast<int>(device_index_)), METRALE_CU_SYMBOL(cuDeviceGet));
  char name[256] = {};
  setup(d.cuDeviceGetName(name, sizeof(name) - 1, device_), METRALE_CU_SYMBOL(cuDeviceGetName));
  device_name_ = name;
  int major = 0;
  int minor = 0;
  int sms = 0;
  setup(d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_), METRALE_CU_SYMBOL(cuDeviceGetAttribute));
  setup(d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_), METRALE_CU_SYMBOL(cuDeviceGetAttribute));
  setup(d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_), METRALE_CU_SYMBOL(cuDeviceGetAttribute));
  size_t memory = 0;
  setup(d.cuDeviceTotalMem(&memory, device_), METRALE_CU_SYMBOL(cuDeviceTotalMem));
  memory_bytes_ = memory;
  sm_count_ = sms > 0 ? static_cast<uint32_t>(sms) : 0;
  target_ = target_for_compute_capability(major, minor);
  target_text_ = target_name(target_);
  setup(d.cuDevicePrimaryCtxRetain(&context_, device_), METRALE_CU_SYMBOL(cuDevicePrimaryCtxRetain));
  try {
    setup(d.cuCtxSetCurrent(context_), METRALE_CU_SYMBOL(cuCtxSetCurrent));
  } catch (...) {
    d.cuDevicePrimaryCtxRelease(device_);
    throw;
  }
}

Instance::~Instance() {
  // Best effort: the process may be exiting, and nothing here may throw.
  const Driver& d = *driver_;
  if (d.cuCtxSetCurrent(context_) == CUDA_SUCCESS) {
    for (const auto& [ptr, bytes] : allocations_) d.cuMemFree(static_cast<CUdeviceptr>(ptr));
    for (const auto& [id, stream] : streams_) d.cuStreamDestroy(stream);
    for (const auto& [name, state] : modules_) {
      if (state->module != nullptr) d.cuModuleUnload(state->module);
    }
  }
  d.cuDevicePrimaryCtxRelease(device_);
}

void Instance::make_current() const {
  // The primary context must be current on whichever host thread calls in.
  Driver::check(driver_->cuCtxSetCurrent(context_), METRALE_CU_SYMBOL(cuCtxSetCurrent));
}

void Instance::set_last_error(std::string message) {
  std::lock_guard lock(mutex_);
  errors_[std::this_thread::get_id()] = std::move(message);
}

const char* Instance::last_error() const {
  std::lock_guard lock(mutex_);
  const auto it = errors_.find(std::this_thread::get_id());
  return it == errors_.end() ? "" : it->second.c_str();  // map nodes are stable
}

void Instance::device_info(metrale_device_info* out) const {
  if (out == nullptr) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "device_info: null output");
  out->struct_size = sizeof(metrale_device_info);
  out->name = device_name_.c_str();
  out->target = target_text_.c_str();
  out->memory_bytes = memory_bytes_;
  out->compute_units = sm_count_;
}

void Instance::list_kernels(const metrale_kernel_desc** kernels, size_t* count) const {
  if (kernels == nullptr || count == nullptr) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "list_kernels: null output");
  // Everything the sources promise, gated ones included: the runtime gates by min_target too
  // and reports them as gated rather than missing.
  *kernels = catalog_.descriptors().data();
  *count = catalog_.descriptors().size();
}

Instance::ModuleState& Instance::load_module(const CatalogModule& module) {
  ModuleState* state = nullptr;
  {
    std::lock_guard lock(mutex_);
    state = modules_.at(module.name).get();
  }
  std::lock_guard compile_lock(state->mutex);
  if (state->attempted) {
    if (state->failure) throw *state->failure;
    return *state;
  }
  state->attempted = true;
  try {
    CompiledModule compiled = compiler_->compile(module, target_);
    make_current();
    CUmodule handle = nullptr;
    const CUresult loaded = driver_->cuModuleLoadData(&handle, compiled.image.data());
    if (loaded != CUDA_SUCCESS) {
      throw PluginError(status_for(loaded), std::string(METRALE_CU_SYMBOL(cuModuleLoadData)) + " failed for module '" +
                                                module.name + "' (" + compiled.source_path.string() + ", " +
                                                compiled.target + ", " + std::to_string(compiled.image.size()) +
                                                " bytes): " + cuda_error_name(loaded) + " (" +
                                                std::to_string(static_cast<int>(loaded)) + ")");
    }
    log_.info("module '" + module.name + "' loaded for " + compiled.target + " (" +
              (compiled.cache_hit ? "compile cache hit" : "compiled") + " in " +
              std::to_string(static_cast<int>(compiled.seconds * 1000)) + " ms, " +
              std::to_string(compiled.image.size()) + " bytes)");
    compiled.image.clear();
    compiled.image.shrink_to_fit();
    state->module = handle;
    state->compiled = std::move(compiled);
  } catch (const PluginError& e) {
    state->failure = e;
    log_.warn(e.what());
    throw;
  }
  return *state;
}

uint64_t Instance::get_kernel(const char* module_name, const char* kernel_name) {
  if (module_name == nullptr || kernel_name == nullptr) {
    throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "get_kernel: null module or kernel name");
  }
  const std::string key = std::string(module_name) + "/" + kernel_name;
  {
    std::lock_guard lock(mutex_);
    if (auto it = handles_.find(key); it != handles_.end()) return it->second;
  }
  const CatalogModule* module = catalog_.find(module_name);
  if (module == nullptr) {
    throw PluginError(METRALE_STATUS_NOT_FOUND, std::string("no module '") + module_name +
                                                    "' in the CUDA manifest (modules: " + names_of_modules(catalog_) + ")");
  }
  const CatalogKernel* kernel = module->find(kernel_name);
  if (kernel == nullptr) {
    throw PluginError(METRALE_STATUS_NOT_FOUND, std::string("module '") + module_name + "' has no kernel '" +
                                                    kernel_name + "' (kernels: " + names_of_kernels(*module) + ")");
  }
  if (kernel->min_target && !target_satisfies(target_, *kernel->min_target)) {
    throw PluginError(METRALE_STATUS_INCOMPATIBLE, "kernel " + key + " requires " + target_name(*kernel->min_target) +
                                                       "; this device is " + target_text_ + " (" + device_name_ + ")");
  }
  ModuleState& state = load_module(*module);
  if (const std::string problem = check_kernel(*kernel, *state.compiled); !problem.empty()) {
    const bool missing = state.compiled->cubin && state.compiled->cubin->find(kernel->name) == nullptr;
    throw PluginError(missing ? METRALE_STATUS_NOT_FOUND : METRALE_STATUS_INCOMPATIBLE, problem);
  }
  make_current();
  CUfunction function = nullptr;
  const CUresult found = driver_->cuModuleGetFunction(&function, state.module, kernel_name);
  if (found != CUDA_SUCCESS) {
    throw PluginError(status_for(found), std::string(METRALE_CU_SYMBOL(cuModuleGetFunction)) + "(" + key +
                                             ") failed: " + cuda_error_name(found) + " (" +
                                             std::to_string(static_cast<int>(found)) + ")");
  }
  std::lock_guard lock(mutex_);
  if (auto it = handles_.find(key); it != handles_.end()) return it->second;  // another thread won
  kernels_.push_back({module->name, kernel->name, function, kernel->params.size(), 48 * 1024});
  const uint64_t handle = kernels_.size();
  handles_.emplace(key, handle);
  return handle;
}

void Instance::check_range(uint64_t ptr, size_t bytes, const char* what) const {
  // Caught here rather than by the driver: a stray address becomes a clean error, not a fault.
  std::lock_guard lock(mutex_);
  auto it = allocations_.upper_bound(ptr);
  if (it != allocations_.begin()) {
    --it;
    if (ptr >= it->first && ptr - it->first <= it->second && bytes <= it->second - (ptr - it->first)) return;
  }
  throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, std::string(what) + ": device range [0x" +
                                                         [&] {
                                                           std::ostringstream s;
                                                           s << std::hex << ptr << ", 0x" << ptr + bytes;
                                                           return s.str();
                                                         }() +
                                                         ") is not inside an allocation of this backend");
}

uint64_t Instance::mem_alloc(size_t bytes) {
  make_current();
  CUdeviceptr ptr = 0;
  // A zero-byte request still gets a distinct, freeable address.
  Driver::check(driver_->cuMemAlloc(&ptr, bytes == 0 ? 1 : bytes),
                std::string(METRALE_CU_SYMBOL(cuMemAlloc)) + "(" + std::to_string(bytes) + " bytes)");
  std::lock_guard lock(mutex_);
  allocations_[static_cast<uint64_t>(ptr)] = bytes;
  return static_cast<uint64_t>(ptr);
}

void Instance::mem_free(uint64_t ptr) {
  if (ptr == 0) return;
  {
    std::lock_guard lock(mutex_);
    if (allocations_.count(ptr) == 0) {
      std::ostringstream s;
      s << "mem_free: 0x" << std::hex << ptr << " is not an allocation of this backend";
      throw PluginError(METRALE_STATUS_NOT_FOUND, s.str());
    }
  }
  make_current();
  Driver::check(driver_->cuMemFree(static_cast<CUdeviceptr>(ptr)), METRALE_CU_SYMBOL(cuMemFree));
  std::lock_guard lock(mutex_);
  allocations_.erase(ptr);
}

CUstream Instance::stream_of(uint64_t id) const {
  if (id == 0) return nullptr;  // the context's default stream
  std::lock_guard lock(mutex_);
  const auto it = streams_.find(id);
  if (it == streams_.end()) throw PluginError(METRALE_STATUS_NOT_FOUND, "no stream " + std::to_string(id) + " on this backend");
  return it->second;
}

void Instance::copy_to_device(uint64_t dst, const void* src, size_t bytes, uint64_t stream) {
  if (bytes == 0) return;
  if (src == nullptr) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "copy_to_device: null source");
  check_range(dst, bytes, "copy_to_device");
  const CUstream s = stream_of(stream);
  make_current();
  Driver::check(driver_->cuMemcpyHtoDAsync(static_cast<CUdeviceptr>(dst), src, bytes, s), METRALE_CU_SYMBOL(cuMemcpyHtoDAsync));
}

void Instance::copy_to_host(void* dst, uint64_t src, size_t bytes, uint64_t stream) {
  if (bytes == 0) return;
  if (dst == nullptr) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "copy_to_host: null destination");
  check_range(src, bytes, "copy_to_host");
  const CUstream s = stream_of(stream);
  make_current();
  Driver::check(driver_->cuMemcpyDtoHAsync(dst, static_cast<CUdeviceptr>(src), bytes, s), METRALE_CU_SYMBOL(cuMemcpyDtoHAsync));
}

void Instance::copy_device(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream) {
  if (bytes == 0) return;
  check_range(dst, bytes, "copy_device destination");
  check_range(src, bytes, "copy_device source");
  const CUstream s = stream_of(stream);
  make_current();
  Driver::check(driver_->cuMemcpyDtoDAsync(static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src), bytes, s),
                METRALE_CU_SYMBOL(cuMemcpyDtoDAsync));
}

void Instance::memset_device(uint64_t dst, uint8_t value, size_t bytes, uint64_t stream) {
  if (bytes == 0) return;
  check_range(dst, bytes, "memset_device");
  const CUstream s = stream_of(stream);
  make_current();
  Driver::check(driver_->cuMemsetD8Async(static_cast<CUdeviceptr>(dst), value, bytes, s), METRALE_CU_SYMBOL(cuMemsetD8Async));
}

uint64_t Instance::stream_create() {
  make_current();
  CUstream stream = nullptr;
  Driver::check(driver_->cuStreamCreate(&stream, CU_STREAM_DEFAULT), METRALE_CU_SYMBOL(cuStreamCreate));
  std::lock_guard lock(mutex_);
  const uint64_t id = next_stream_++;
  streams_[id] = stream;
  return id;
}

void Instance::stream_destroy(uint64_t id) {
  if (id == 0) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "stream_destroy: the default stream (0) is never destroyed");
  const CUstream stream = stream_of(id);
  make_current();
  Driver::check(driver_->cuStreamDestroy(stream), METRALE_CU_SYMBOL(cuStreamDestroy));
  std::lock_guard lock(mutex_);
  streams_.erase(id);
}

void Instance::stream_synchronize(uint64_t id) {
  const CUstream stream = stream_of(id);
  make_current();
  Driver::check(driver_->cuStreamSynchronize(stream), METRALE_CU_SYMBOL(cuStreamSynchronize));
}

void Instance::launch(uint64_t kernel, const metrale_launch_config* config, void* const* args, size_t arg_count) {
  if (config == nullptr) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "launch: null launch config");
  KernelEntry* entry = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (kernel == 0 || kernel > kernels_.size()) {
      throw PluginError(METRALE_STATUS_NOT_FOUND, "launch: unknown kernel handle " + std::to_string(kernel));
    }
    entry = &kernels_[kernel - 1];
  }
  const std::string name = entry->module + "/" + entry->name;
  if (arg_count != entry->param_count) {
    throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "launch " + name + ": " + std::to_string(arg_count) +
                                                           " arguments given, the kernel takes " +
                                                           std::to_string(entry->param_count));
  }
  if (arg_count > 0 && args == nullptr) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "launch " + name + ": null argument array");
  for (size_t i = 0; i < arg_count; ++i) {
    if (args[i] == nullptr) throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "launch " + name + ": argument " + std::to_string(i) + " is null");
  }
  for (int i = 0; i < 3; ++i) {
    if (config->grid[i] == 0 || config->block[i] == 0) {
      throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, "launch " + name + ": grid and block dimensions must be >= 1");
    }
  }
  const CUstream stream = stream_of(config->stream);
  make_current();
  if (config->shared_mem_bytes > 48 * 1024) {
    // Above 48 KiB the function must opt in first; done once per size increase.
    std::lock_guard lock(mutex_);
    if (config->shared_mem_bytes > entry->dynamic_smem_allowed) {
      Driver::check(driver_->cuFuncSetAttribute(entry->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                static_cast<int>(config->shared_mem_bytes)),
                    std::string(METRALE_CU_SYMBOL(cuFuncSetAttribute)) + "(" + name + ", " +
                        std::to_string(config->shared_mem_bytes) + " bytes dynamic shared memory)");
      entry->dynamic_smem_allowed = config->shared_mem_bytes;
    }
  }
  // cuLaunchKernel reads the array and the values it points to; it never writes them.
  Driver::check(driver_->cuLaunchKernel(entry->function, config->grid[0], config->grid[1], config->grid[2],
                                        config->block[0], config->block[1], config->block[2],
                                        config->shared_mem_bytes, stream, const_cast<void**>(args), nullptr),
                std::string(METRALE_CU_SYMBOL(cuLaunchKernel)) + "(" + name + ")");
}

}  // namespace metrale::cuda
