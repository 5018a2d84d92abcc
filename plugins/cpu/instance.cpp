// SPDX-License-Identifier: MIT OR Apache-2.0
#include "instance.hpp"
#include "memory_blocks.hpp"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <new>
#include <thread>
#include <utility>
#include <vector>

namespace metrale::cpu {

namespace {

// Handles carry a tag so a stray integer is not taken for a kernel ("cpu" in the high bytes).
constexpr uint64_t kHandleBase = 0x6370750000000000ull;
constexpr unsigned kMaxThreads = 1024;

// CUDA's launch limits, so a launch valid here is valid on every backend.
constexpr uint32_t kMaxGridX = 0x7fffffffu;
constexpr uint32_t kMaxGridYZ = 65535;
constexpr uint32_t kMaxBlockXY = 1024;
constexpr uint32_t kMaxBlockZ = 64;
constexpr uint32_t kMaxBlockThreads = 1024;

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%" PRIx64, value);
  return text;
}

unsigned default_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return static_cast<unsigned>(count);
  }
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware > 0 ? hardware : 1;
}

uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

// Reads the whole of `text` as a decimal in [1, kMaxThreads].
bool parse_threads(const char* text, unsigned& value) {
  const char* end = text + std::strlen(text);
  auto [stop, error] = std::from_chars(text, end, value);
  return error == std::errc() && stop == end && value >= 1 && value <= kMaxThreads;
}

}  // namespace

void Instance::FreeDeleter::operator()(unsigned char* p) const noexcept { std::free(p); }

metrale_status Instance::create(const metrale_backend_create_info* info,
                                std::unique_ptr<Instance>& out, std::string& error) {
  if (info == nullptr) {
    error = "create info is NULL";
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
  if (info->struct_size < sizeof(metrale_backend_create_info)) {
    error = "create info struct_size " + std::to_string(info->struct_size) +
            " is smaller than ABI v1's " + std::to_string(sizeof(metrale_backend_create_info));
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
  const metrale_host_callbacks* host = info->host;
  if (host == nullptr || host->struct_size < sizeof(metrale_host_callbacks) ||
      host->log == nullptr) {
    error = "host callbacks are missing or incomplete (a log callback is required)";
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
  if (info->device_index != 0) {
    error = "the cpu backend has one device (index 0); asked for device " +
            std::to_string(info->device_index);
    return METRALE_STATUS_NOT_FOUND;
  }
  if (info->option_count != 0 && info->options == nullptr) {
    error = "option_count is " + std::to_string(info->option_count) + " but options is NULL";
    return METRALE_STATUS_INVALID_ARGUMENT;
  }

  Options options;
  std::vector<std::string> unknown;
  for (uint32_t i = 0; i < info->option_count; ++i) {
    const metrale_option& option = info->options[i];
    if (option.key == nullptr || option.value == nullptr) {
      error = "option " + std::to_string(i) + " has a NULL key or value";
      return METRALE_STATUS_INVALID_ARGUMENT;
    }
    if (std::strcmp(option.key, "target") == 0) {
      options.target = option.value;
    } else if (std::strcmp(option.key, "threads") == 0) {
      if (std::strcmp(option.value, "auto") == 0) {
        options.threads = 0;
      } else if (!parse_threads(option.value, options.threads)) {
        error = std::string("option threads='") + option.value +
                "' is not a whole number from 1 to " + std::to_string(kMaxThreads) +
                " (or 'auto')";
        return METRALE_STATUS_INVALID_ARGUMENT;
      }
    } else if (std::strcmp(option.key, "pin") == 0) {
      if (std::strcmp(option.value, "0") == 0) {
        options.pin = false;
      } else if (std::strcmp(option.value, "1") == 0) {
        options.pin = true;
      } else {
        error = std::string("option pin='") + option.value + "' is not valid: expected 0 or 1";
        return METRALE_STATUS_INVALID_ARGUMENT;
      }
    } else {
      unknown.emplace_back(option.key);
    }
  }

  const CpuFeatures features = detect_features();
  Tier tier = Tier::baseline;
  if (metrale_status status = choose_tier(options.target, features, tier, error);
      status != METRALE_STATUS_OK)
    return status;

  const unsigned threads = options.threads != 0 ? options.threads : default_threads();
  out.reset(new Instance(host, tier, features, threads, options.pin));
  for (const std::string& key : unknown)
    out->log(METRALE_LOG_WARN, "cpu backend: ignoring unknown option '" + key +
                                   "' (known options: target, threads, pin)");
  if (!features.detected)
    out->log(METRALE_LOG_WARN, "cpu backend: CPU feature detection failed; using the baseline tier");
  out->log_start(options.pin);
  return METRALE_STATUS_OK;
}

void Instance::log_start(bool pin) const {
  // Pinning is best effort: a worker that cannot be pinned runs unpinned, with a warning.
  for (const std::string& failure : pool_->pin_failures())
    log(METRALE_LOG_WARN, "cpu backend: option pin=1: " + failure);
  std::string pinning;
  if (pin) {
    const unsigned workers = pool_->threads() - 1;
    const unsigned pinned = pool_->pinned();
    pinning = pinned == workers ? ", pinned"
                                : ", pinned " + std::to_string(pinned) + " of " + std::to_string(workers) + " workers";
  }
  log(METRALE_LOG_DEBUG, "cpu backend: " + device_name_ + ", target " + tier_target(tier_) +
                             " (int8 dot products: " + int8_dot_name(tier_, features_) + ", FP8 decode: " +
                             fp8_decode_name(tier_, features_) + "), " + std::to_string(pool_->threads()) +
                             " threads" + pinning);
}

Instance::Instance(const metrale_host_callbacks* host, Tier tier, CpuFeatures features,
                   unsigned threads, bool pin)
    : host_(host), tier_(tier), features_(std::move(features)) {
  device_name_ = features_.model.empty() ? std::string("host CPU") : features_.model;
  memory_bytes_ = physical_memory();
  for (size_t i = 0; i < kernel_specs().size(); ++i) bodies_.push_back(kernel_body(i, tier_, features_));
  scratch_.reserve(threads);
  scratch_ptrs_.reserve(threads);
  for (unsigned slot = 0; slot < threads; ++slot) {
    void* block = std::aligned_alloc(kScratchAlign, kScratchBytes);
    if (block == nullptr) throw std::bad_alloc();
    scratch_.emplace_back(static_cast<unsigned char*>(block));
    scratch_ptrs_.push_back(static_cast<unsigned char*>(block));
  }
  pool_ = std::make_unique<ThreadPool>(threads, pin);
}

Instance::~Instance() {
  pool_.reset();
  for (const auto& [address, bytes] : allocations_)
    if (!borrowed_.contains(address)) free_block(address, bytes);
}

void Instance::log(metrale_log_level level, const std::string& message) const {
  host_->log(host_->user, level, message.c_str());
}

const char* Instance::last_error() const {
  std::lock_guard lock(error_mutex_);
  auto it = errors_.find(std::this_thread::get_id());
  return it == errors_.end() ? "" : it->second.c_str();
}

metrale_status Instance::fail(metrale_status status, std::string message) const {
  std::lock_guard lock(error_mutex_);
  errors_[std::this_thread::get_id()] = std::move(message);
  return status;
}

metrale_status Instance::device_info(metrale_device_info* out) {
  if (out == nullptr) return fail(METRALE_STATUS_INVALID_ARGUMENT, "device_info: out is NULL");
  if (out->struct_size != 0 && out->struct_size < sizeof(metrale_device_info))
    return fail(METRALE_STATUS_INVALID_ARGUMENT, "device_info: struct_size too small");
  out->struct_size = sizeof(metrale_device_info);
  out->name = device_name_.c_str();
  out->target = tier_target(tier_);
  out->memory_bytes = memory_bytes_;
  out->compute_units = pool_->threads();
  return METRALE_STATUS_OK;
}

metrale_status Instance::list_kernels(const metrale_kernel_desc** kernels, size_t* count) {
  if (kernels == nullptr || count == nullptr)
    return fail(METRALE_STATUS_INVALID_ARGUMENT, "list_kernels: kernels or count is NULL");
  *kernels = kernel_descs().data();
  *count = kernel_descs().size();
  return METRALE_STATUS_OK;
}

metrale_status Instance::get_kernel(const char* module, const char* name, uint64_t* handle) {
  if (module == nullptr || name == nullptr || handle == nullptr)
    return fail(METRALE_STATUS_INVALID_ARGUMENT, "get_kernel: module, name or handle is NULL");
  *handle = 0;
  std::string listed;
  const auto specs = kernel_specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    if (std::strcmp(specs[i].module, module) != 0) continue;
    if (std::strcmp(specs[i].name, name) == 0) {
      *handle = kHandleBase + i + 1;
      return METRALE_STATUS_OK;
    }
    listed += (listed.empty() ? "" : ", ") + std::string(specs[i].name);
  }
  if (listed.empty()) {
    std::string modules;
    for (const KernelSpec& spec : specs)
      if (modules.find(spec.module) == std::string::npos)
        modules += (modules.empty() ? "" : ", ") + std::string(spec.module);
    return fail(METRALE_STATUS_NOT_FOUND, std::string("the cpu backend has no module '") + module +
                                              "' (modules: " + modules + ")");
  }
  return fail(METRALE_STATUS_NOT_FOUND, std::string("module '") + module +
                                            "' of the cpu backend has no kernel '" + name +
                                            "'; it has: " + listed);
}

metrale_status Instance::mem_alloc(size_t bytes, uint64_t* device_ptr) {
  if (device_ptr == nullptr) return fail(METRALE_STATUS_INVALID_ARGUMENT, "mem_alloc: device_ptr is NULL");
  *device_ptr = 0;
  if (bytes == 0) return fail(METRALE_STATUS_INVALID_ARGUMENT, "mem_alloc: size is 0 bytes");
  if (bytes > std::numeric_limits<size_t>::max() - kHugePage)
    return fail(METRALE_STATUS_OUT_OF_MEMORY, "mem_alloc: " + std::to_string(bytes) + " bytes is more than the address space");
  // Weight-sized buffers go on 2 MiB boundaries and ask for transparent huge pages: the W4A16
  // kernels stream several panels (and MoE experts) at once across hundreds of MB, and 4 KiB
  // pages would cost a TLB walk every few cache lines. Where THP is off the advice is a no-op.
  const size_t rounded = block_bytes(bytes);
  void* block = allocate_block(bytes);
  if (block == nullptr)
    return fail(METRALE_STATUS_OUT_OF_MEMORY,
                "mem_alloc: cannot allocate " + std::to_string(bytes) + " bytes of host memory");
#if defined(MADV_HUGEPAGE)
  if (bytes >= kHugePage) ::madvise(block, rounded, MADV_HUGEPAGE);
#endif
  const auto address = reinterpret_cast<uint64_t>(block);
  try {
    std::unique_lock lock(memory_mutex_);
    allocations_.emplace(address, bytes);
  } catch (...) {
    free_block(address, bytes);
    throw;
  }
  *device_ptr = address;
  return METRALE_STATUS_OK;
}

metrale_status Instance::mem_free(uint64_t device_ptr) {
  {
    std::unique_lock lock(memory_mutex_);
    auto it = allocations_.find(device_ptr);
    if (it != allocations_.end() && borrowed_.contains(device_ptr)) {
      lock.unlock();
      return fail(METRALE_STATUS_INVALID_ARGUMENT, "mem_free: " + hex(device_ptr) +
                                                       " is the caller's host memory (metrale_cpu_host_register): "
                                                       "unregister it, its owner frees it");
    }
    if (it != allocations_.end()) {
      const size_t bytes = it->second;
      allocations_.erase(it);
      lock.unlock();
      free_block(device_ptr, bytes);
      return METRALE_STATUS_OK;
    }
  }
  if (device_ptr == 0)
    return fail(METRALE_STATUS_NOT_FOUND, "mem_free: 0 is never an allocation");
  const uint64_t inside = extent(device_ptr);
  return fail(METRALE_STATUS_NOT_FOUND,
              "mem_free: " + hex(device_ptr) +
                  (inside != 0 ? " points inside an allocation but not at its start"
                               : " is not a live allocation of this cpu backend instance "
                                 "(never allocated, or already freed)"));
}

metrale_status Instance::host_register(const void* host, size_t bytes, uint64_t* device_ptr, uint32_t* registered) {
  if (device_ptr == nullptr || registered == nullptr)
    return fail(METRALE_STATUS_INVALID_ARGUMENT, "host_register: device_ptr or registered is NULL");
  *device_ptr = 0;
  *registered = 0;
  if (host == nullptr || bytes == 0)
    return fail(METRALE_STATUS_INVALID_ARGUMENT, "host_register: " + std::string(host == nullptr ? "host is NULL" : "size is 0 bytes"));
  const auto address = reinterpret_cast<uint64_t>(host);
  if (bytes > UINT64_MAX - address) return fail(METRALE_STATUS_INVALID_ARGUMENT, "host_register: the range wraps the address space");
  std::unique_lock lock(memory_mutex_);
  // The allocation at or below `address`, and the first one above it: either may overlap.
  auto above = allocations_.upper_bound(address);
  if (above != allocations_.begin()) {
    const auto below = std::prev(above);
    const uint64_t end = below->first + below->second;
    if (address < end) {
      if (bytes <= end - address) {  // inside live memory already: nothing to register
        *device_ptr = address;
        return METRALE_STATUS_OK;
      }
      lock.unlock();
      return fail(METRALE_STATUS_INVALID_ARGUMENT, "host_register: " + hex(address) + " (" + std::to_string(bytes) +
                                                       " bytes) runs past the end of the live allocation at " + hex(below->first) +
                                                       " (" + std::to_string(below->second) + " bytes)");
    }
  }
  if (above != allocations_.end() && above->first - address < bytes) {
    const std::string other = hex(above->first) + " (" + std::to_string(above->second) + " bytes)";
    lock.unlock();
    return fail(METRALE_STATUS_INVALID_ARGUMENT, "host_register: " + hex(address) + " (" + std::to_string(bytes) +
                                                     " bytes) overlaps the live allocation at " + other);
  }
  allocations_.emplace(address, bytes);
  try {
    borrowed_.insert(address);
  } catch (...) {
    allocations_.erase(address);
    throw;
  }
  *device_ptr = address;
  *registered = 1;
  return METRALE_STATUS_OK;
}

metrale_status Instance::host_unregister(uint64_t device_ptr) {
  std::unique_lock lock(memory_mutex_);
  if (borrowed_.erase(device_ptr) == 0) {
    lock.unlock();
    return fail(METRALE_STATUS_NOT_FOUND, "host_unregister: " + hex(device_ptr) + " is not registered host memory");
  }
  allocations_.erase(device_ptr);
  return METRALE_STATUS_OK;
}

uint64_t Instance::extent(uint64_t address) const {
  std::shared_lock lock(memory_mutex_);
  auto it = allocations_.upper_bound(address);
  if (it == allocations_.begin()) return 0;
  --it;
  const uint64_t end = it->first + it->second;
  return address < end ? end - address : 0;
}

metrale_status Instance::check_range(const char* role, uint64_t address, size_t bytes) const {
  std::shared_lock lock(memory_mutex_);
  auto it = allocations_.upper_bound(address);
  if (it == allocations_.begin() || address >= std::prev(it)->first + std::prev(it)->second) {
    return fail(METRALE_STATUS_INVALID_ARGUMENT,
                std::string(role) + " " + hex(address) + " (" + std::to_string(bytes) +
                    " bytes) is not inside any live allocation of this cpu backend instance");
  }
  --it;
  const uint64_t end = it->first + it->second;
  if (bytes > end - address) {
    return fail(METRALE_STATUS_INVALID_ARGUMENT,
                std::string(role) + " " + hex(address) + " (" + std::to_string(bytes) +
                    " bytes) runs " + std::to_string(bytes - (end - address)) +
                    " bytes past the end of its allocation (" + hex(it->first) + ", " +
                    std::to_string(it->second) + " bytes)");
  }
  return METRALE_STATUS_OK;
}

metrale_status Instance::check_stream(const char* operation, uint64_t stream) const {
  if (stream == 0) return METRALE_STATUS_OK;
  std::lock_guard lock(stream_mutex_);
  if (streams_.count(stream) != 0) return METRALE_STATUS_OK;
  return fail(METRALE_STATUS_NOT_FOUND, std::string(operation) + ": stream " +
                                            std::to_string(stream) +
                                            " does not exist on this cpu backend instance");
}

metrale_status Instance::copy_to_device(uint64_t dst, const void* src, size_t bytes,
                                        uint64_t stream) {
  if (metrale_status s = check_stream("copy_to_device", stream); s != METRALE_STATUS_OK) return s;
  if (bytes == 0) return METRALE_STATUS_OK;
  if (src == nullptr) return fail(METRALE_STATUS_INVALID_ARGUMENT, "copy_to_device: source is NULL");
  if (metrale_status s = check_range("copy_to_device destination", dst, bytes); s != METRALE_STATUS_OK)
    return s;
  std::memmove(reinterpret_cast<void*>(dst), src, bytes);
  return METRALE_STATUS_OK;
}

metrale_status Instance::copy_to_host(void* dst, uint64_t src, size_t bytes, uint64_t stream) {
  if (metrale_status s = check_stream("copy_to_host", stream); s != METRALE_STATUS_OK) return s;
  if (bytes == 0) return METRALE_STATUS_OK;
  if (dst == nullptr) return fail(METRALE_STATUS_INVALID_ARGUMENT, "copy_to_host: destination is NULL");
  if (metrale_status s = check_range("copy_to_host source", src, bytes); s != METRALE_STATUS_OK)
    return s;
  std::memmove(dst, reinterpret_cast<const void*>(src), bytes);
  return METRALE_STATUS_OK;
}

metrale_status Instance::copy_device(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream) {
  if (metrale_status s = check_stream("copy_device", stream); s != METRALE_STATUS_OK) return s;
  if (bytes == 0) return METRALE_STATUS_OK;
  if (metrale_status s = check_range("copy_device source", src, bytes); s != METRALE_STATUS_OK)
    return s;
  if (metrale_status s = check_range("copy_device destination", dst, bytes); s != METRALE_STATUS_OK)
    return s;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return METRALE_STATUS_OK;
}

metrale_status Instance::memset_device(uint64_t dst, uint8_t value, size_t bytes, uint64_t stream) {
  if (metrale_status s = check_stream("memset_device", stream); s != METRALE_STATUS_OK) return s;
  if (bytes == 0) return METRALE_STATUS_OK;
  if (metrale_status s = check_range("memset_device destination", dst, bytes); s != METRALE_STATUS_OK)
    return s;
  std::memset(reinterpret_cast<void*>(dst), value, bytes);
  return METRALE_STATUS_OK;
}

metrale_status Instance::stream_create(uint64_t* stream) {
  if (stream == nullptr) return fail(METRALE_STATUS_INVALID_ARGUMENT, "stream_create: stream is NULL");
  std::lock_guard lock(stream_mutex_);
  const uint64_t id = next_stream_++;
  streams_.insert(id);
  *stream = id;
  return METRALE_STATUS_OK;
}

metrale_status Instance::stream_destroy(uint64_t stream) {
  if (stream == 0)
    return fail(METRALE_STATUS_INVALID_ARGUMENT,
                "stream_destroy: stream 0 is the default stream and is never destroyed");
  std::lock_guard lock(stream_mutex_);
  if (streams_.erase(stream) == 0)
    return fail(METRALE_STATUS_NOT_FOUND, "stream_destroy: stream " + std::to_string(stream) +
                                              " does not exist on this cpu backend instance");
  return METRALE_STATUS_OK;
}

metrale_status Instance::stream_synchronize(uint64_t stream) {
  // Every operation completed before its call returned: nothing is pending.
  return check_stream("stream_synchronize", stream);
}

namespace {

struct LaunchJob {
  BlockFn body;
  const KernelArgs* args;
  uint32_t blocks_x;
  unsigned char* const* scratch;
  const uint32_t* rows;  // the grid rows that do work, or null for all of them
};

void run_block(void* context, uint64_t task, unsigned slot) {
  const auto* job = static_cast<const LaunchJob*>(context);
  const auto bx = static_cast<uint32_t>(task % job->blocks_x);
  const auto row = static_cast<uint32_t>(task / job->blocks_x);
  job->body(*job->args, bx, job->rows ? job->rows[row] : row, job->scratch[slot]);
}

std::string dims(const uint32_t (&d)[3]) {
  // Appended piecewise: GCC 12 at -O3 reports a false -Wrestrict in "(" + std::string&&.
  std::string out("(");
  out += std::to_string(d[0]);
  out += ", ";
  out += std::to_string(d[1]);
  out += ", ";
  out += std::to_string(d[2]);
  out += ')';
  return out;
}

// Why the grid and block of `config` cannot be launched ("" when they can).
std::string launch_shape_problem(const metrale_launch_config& config) {
  const auto& grid = config.grid;
  const auto& block = config.block;
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0 ||
      block[2] == 0)
    return "grid " + dims(grid) + " and block " + dims(block) + " must be at least 1 in every dimension";
  if (grid[0] > kMaxGridX || grid[1] > kMaxGridYZ || grid[2] > kMaxGridYZ)
    return "grid " + dims(grid) + " exceeds the limits (2^31-1, 65535, 65535)";
  if (block[0] > kMaxBlockXY || block[1] > kMaxBlockXY || block[2] > kMaxBlockZ ||
      uint64_t{block[0]} * block[1] * block[2] > kMaxBlockThreads)
    return "block " + dims(block) + " exceeds the limits (1024, 1024, 64; at most 1024 threads)";
  if (grid[2] != 1) return "grid " + dims(grid) + ": the kernel's grid is two-dimensional (z = 1)";
  return "";
}

// Copies the launch arguments into `values` (32-bit parameters widened); names a NULL one.
std::string read_arguments(const KernelSpec& spec, void* const* args, KernelArgs& values) {
  for (uint32_t i = 0; i < spec.param_count; ++i) {
    if (args[i] == nullptr)
      return "argument " + std::to_string(i) + " ('" + spec.param_names[i] + "') points to NULL";
    switch (spec.param_types[i]) {
      case METRALE_PARAM_U32:
      case METRALE_PARAM_I32:
      case METRALE_PARAM_F32: {
        uint32_t value;
        std::memcpy(&value, args[i], sizeof value);
        values.v[i] = value;
        break;
      }
      default:
        std::memcpy(&values.v[i], args[i], sizeof values.v[i]);
        break;
    }
  }
  return "";
}

}  // namespace

metrale_status Instance::launch(uint64_t kernel, const metrale_launch_config* config,
                                void* const* args, size_t arg_count) {
  // The handle is an index into the static kernel table: no lookup, no lock.
  const auto specs = kernel_specs();
  if (kernel <= kHandleBase || kernel > kHandleBase + specs.size())
    return fail(METRALE_STATUS_NOT_FOUND,
                "launch: " + hex(kernel) + " is not a kernel handle of the cpu backend");
  const size_t index = kernel - kHandleBase - 1;
  const KernelSpec& spec = specs[index];
  // Messages are made only when the launch fails: one that passes allocates nothing.
  const auto failed = [&](metrale_status status, const std::string& problem) {
    return fail(status, std::string("launch ") + spec.module + "/" + spec.name + ": " + problem);
  };
  if (config == nullptr) return failed(METRALE_STATUS_INVALID_ARGUMENT, "config is NULL");
  if (arg_count != spec.param_count) {
    std::string names;
    for (uint32_t i = 0; i < spec.param_count; ++i)
      names += (i ? ", " : "") + std::string(spec.param_names[i]);
    return failed(METRALE_STATUS_INVALID_ARGUMENT, "takes " + std::to_string(spec.param_count) +
                                                       " arguments (" + names + "), got " +
                                                       std::to_string(arg_count));
  }
  if (args == nullptr) return failed(METRALE_STATUS_INVALID_ARGUMENT, "args is NULL");
  if (metrale_status s = check_stream("launch", config->stream); s != METRALE_STATUS_OK) return s;

  const auto& grid = config->grid;
  if (std::string problem = launch_shape_problem(*config); !problem.empty())
    return failed(METRALE_STATUS_INVALID_ARGUMENT, problem);
  KernelArgs values{};
  if (std::string problem = read_arguments(spec, args, values); !problem.empty())
    return failed(METRALE_STATUS_INVALID_ARGUMENT, problem);

  BlockRange needed;
  std::string error;
  if (metrale_status s = spec.validate(values, *this, needed, error); s != METRALE_STATUS_OK)
    return failed(s, error);
  if (grid[0] < needed.x || grid[1] < needed.y)
    return failed(METRALE_STATUS_INVALID_ARGUMENT,
                  "grid " + dims(grid) + " does not cover the problem: it needs " + spec.grid_rule +
                      " = (" + std::to_string(needed.x) + ", " + std::to_string(needed.y) + ", 1)");
  // Blocks past `needed` would clip to nothing, and rows without work (needed.y_offsets) would
  // return at once; neither is run.
  uint64_t rows = needed.y;
  const uint32_t* active = nullptr;
  // Per launch, never thread_local: storage with a destructor in the caller's threads would keep
  // the library mapped after its instances are gone (instance.hpp, errors_). On the stack up to
  // kStackRows rows (a MoE layer's experts), so such a launch allocates nothing either.
  constexpr uint32_t kStackRows = 512;
  uint32_t stack_rows[kStackRows];
  std::vector<uint32_t> heap_rows;
  if (needed.y_offsets != nullptr) {
    if (needed.y > kStackRows) heap_rows.resize(needed.y);
    uint32_t* list = needed.y > kStackRows ? heap_rows.data() : stack_rows;
    rows = 0;
    for (uint32_t by = 0; by < needed.y; ++by)
      if (needed.y_offsets[by + 1] > needed.y_offsets[by]) list[rows++] = by;
    active = list;
  }
  LaunchJob job{bodies_[index], &values, needed.x, scratch_ptrs_.data(), active};
  pool_->run(uint64_t{needed.x} * rows, run_block, &job);
  return METRALE_STATUS_OK;
}

}  // namespace metrale::cpu
