// SPDX-License-Identifier: MIT OR Apache-2.0
// One test plugin source, built into several shared modules that each misbehave in exactly one
// way (as the Vulkan loader's test drivers do). Compile-time FAULT_* macros pick the fault; with
// none it is a well-behaved backend whose kernel set is whatever its manifest lists (like a JIT
// backend), so tests shape backends by writing manifests.
//
// Kernels: "test/fill" (out: ptr, n: u32, value: f32) fills n floats, really, block by block;
// "w4a16/w4a16_gemv" (docs/kernels.md) computes — correctly, or with FAULT_WRONG_GEMV without the
// last packed word of K (8 codes), a plausible bug the conformance suite must catch;
// "w4a16/w4a16_repack" copies, or with FAULT_XOR_LAYOUT XORs every code word with kXorLayout (the
// layout "fault-xor"), which that variant's w4a16_gemv undoes, so weights that skipped the repack
// give wrong results; "act/silu_mul" and "act/gelu_mul" compute, so a dense FFN runs end to end on
// one row. Every other listed kernel resolves and launching it only counts the launch.
//
// Variants that break the C ABI's no-exception rule, as a careless C++ plugin would: FAULT_*_THROWS
// makes mem_alloc, copy_to_device, stream_create, launch or destroy throw a std::runtime_error;
// FAULT_ALLOC_REFUSES makes mem_alloc of more than 1 MiB answer INVALID_ARGUMENT (not out of memory);
// FAULT_DEVICE_INFO_FAILS makes device_info fail, after create() succeeded.
// FAULT_LAUNCH_RENDEZVOUS makes every launch wait inside launch() until kRendezvous launches are
// there at once (tests/abi/test_launch_path.cpp: nothing in the runtime serialises launches).
#include <metrale/plugin_abi.h>

#include "fault_manifest.hpp"
#include "numeric.hpp"  // the CPU plugin's bf16/f16 conversions (internal linkage)

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef FAULT_BACKEND_NAME
#define FAULT_BACKEND_NAME "fault"
#endif

#include <cmath>

// Every nibble non-zero: every code changes under the "fault-xor" layout.
[[maybe_unused]] constexpr uint32_t kXorLayout = 0x9abcdef1u;

struct metrale_backend {
  std::vector<std::string> modules, names;              // storage for descriptors
  std::vector<std::vector<metrale_param_type>> params;  // per kernel
  std::vector<metrale_kernel_desc> descs;
  std::map<uint64_t, void*> allocations;
  uint64_t next_stream = 1;
  std::string target = "test-target";
  std::string device_name = "fault test device";  // plus " #<device_index>" and " key=value" per option
  std::string last_error;
  std::atomic<uint64_t> launches{0};  // launches may come from several threads at once
  std::mutex mutex;
  // FAULT_LAUNCH_RENDEZVOUS: launches inside launch() now and at most, whether all were at once.
  std::condition_variable met;
  uint32_t inside = 0, most_inside = 0;
  bool all_met = false, gave_up = false;
};

namespace {

// destroy() calls in this library, for the extension "fault_destroy_count" (ownership tests).
std::atomic<uint32_t> destroy_count{0};

[[maybe_unused]] void set_error(char* error, size_t size, const std::string& message) {
  if (error && size) std::snprintf(error, size, "%s", message.c_str());
}

metrale_status fail(metrale_backend* b, metrale_status status, const std::string& message) {
  b->last_error = message;
  return status;
}

metrale_status describe(metrale_plugin_info* out) {
  out->backend_name = FAULT_BACKEND_NAME;
  out->version = "test-1";
  out->description = "test plugin built from tests/abi/fault_plugin.cpp";
  return METRALE_STATUS_OK;
}

metrale_status device_count(uint32_t* count, char*, size_t) {
  *count = 1;
  return METRALE_STATUS_OK;
}

metrale_status create(const metrale_backend_create_info* info, metrale_backend** out, char* error, size_t size) {
#if defined(FAULT_CREATE_FAILS)
  (void)info, (void)out;
  set_error(error, size, "fault plugin: create() fails on purpose (FAULT_CREATE_FAILS)");
  return METRALE_STATUS_INTERNAL;
#elif defined(FAULT_CREATE_THROWS)
  (void)info, (void)out, (void)error, (void)size;
  throw std::runtime_error("fault plugin: create() throws on purpose");
#elif defined(FAULT_UNAVAILABLE)
  (void)info, (void)out;
  set_error(error, size, "fault plugin: no device of this kind here (FAULT_UNAVAILABLE)");
  return METRALE_STATUS_UNAVAILABLE;
#else
  try {
    auto backend = std::make_unique<metrale_backend>();
    const fault::ListedManifest manifest = fault::read_manifest(info->manifest_json);
    // The device name reports what create() was given, so tests can see lever-derived options.
    if (info->device_index != 0) backend->device_name += " #" + std::to_string(info->device_index);
    for (uint32_t i = 0; i < info->option_count; ++i) {
      if (std::strcmp(info->options[i].key, "target") == 0) backend->target = info->options[i].value;
      backend->device_name += std::string(" ") + info->options[i].key + "=" + info->options[i].value;
    }
    if (!manifest.target.empty()) backend->target = manifest.target;
    for (const auto& kernel : manifest.kernels) {
#if defined(FAULT_LISTED_NOT_PROVIDED)
      // Leave out the last kernel of every module: the manifest promises more than we have.
      if (kernel.last_of_module) continue;
#endif
      backend->modules.push_back(kernel.module);
      backend->names.push_back(kernel.name);
      backend->params.push_back(kernel.params);
    }
#if defined(FAULT_EXTRA_KERNEL)
    backend->modules.push_back("extra");
    backend->names.push_back("unlisted_kernel");
    backend->params.push_back({METRALE_PARAM_PTR});
#endif
    for (size_t i = 0; i < backend->names.size(); ++i)
      backend->descs.push_back({backend->modules[i].c_str(), backend->names[i].c_str(), backend->params[i].data(),
                                static_cast<uint32_t>(backend->params[i].size())});
    *out = backend.release();
    return METRALE_STATUS_OK;
  } catch (const std::exception& e) {
    set_error(error, size, std::string("fault plugin: ") + e.what());
    return METRALE_STATUS_INVALID_ARGUMENT;
  }
#endif
}

void destroy(metrale_backend* b) {
  if (!b) return;
  ++destroy_count;
#if defined(FAULT_DESTROY_THROWS)
  std::unique_ptr<metrale_backend> owned(b);  // freed as the exception leaves
  for (auto& [address, block] : b->allocations) std::free(block);
  throw std::runtime_error("fault plugin: destroy() throws on purpose");
#endif
  for (auto& [address, block] : b->allocations) std::free(block);
  delete b;
}

const char* last_error(metrale_backend* b) { return b ? b->last_error.c_str() : ""; }

metrale_status device_info(metrale_backend* b, metrale_device_info* out) {
#if defined(FAULT_DEVICE_INFO_FAILS)
  (void)out;
  return fail(b, METRALE_STATUS_INTERNAL, "fault plugin: no device info (FAULT_DEVICE_INFO_FAILS)");
#endif
  out->name = b->device_name.c_str();
  out->target = b->target.c_str();
  out->memory_bytes = 0;
  out->compute_units = 1;
  return METRALE_STATUS_OK;
}

metrale_status list_kernels(metrale_backend* b, const metrale_kernel_desc** kernels, size_t* count) {
  *kernels = b->descs.data();
  *count = b->descs.size();
  return METRALE_STATUS_OK;
}

metrale_status get_kernel(metrale_backend* b, const char* module, const char* name, uint64_t* handle) {
  for (size_t i = 0; i < b->descs.size(); ++i) {
    if (b->modules[i] == module && b->names[i] == name) {
      *handle = i + 1;
      return METRALE_STATUS_OK;
    }
  }
  return fail(b, METRALE_STATUS_NOT_FOUND, std::string("fault plugin has no kernel ") + module + "/" + name);
}

metrale_status mem_alloc(metrale_backend* b, size_t bytes, uint64_t* ptr) {
#if defined(FAULT_ALLOC_THROWS)
  (void)b, (void)bytes, (void)ptr;
  throw std::runtime_error("fault plugin: mem_alloc throws on purpose");
#endif
#if defined(FAULT_ALLOC_REFUSES)
  if (bytes > (size_t{1} << 20))
    return fail(b, METRALE_STATUS_INVALID_ARGUMENT, "fault plugin: mem_alloc refuses more than 1 MiB (FAULT_ALLOC_REFUSES)");
#endif
  void* block = std::calloc(1, bytes ? bytes : 1);
  if (!block) return fail(b, METRALE_STATUS_OUT_OF_MEMORY, "calloc failed");
  std::lock_guard lock(b->mutex);
  *ptr = reinterpret_cast<uint64_t>(block);
  b->allocations[*ptr] = block;
  return METRALE_STATUS_OK;
}

metrale_status mem_free(metrale_backend* b, uint64_t ptr) {
  std::lock_guard lock(b->mutex);
  auto it = b->allocations.find(ptr);
  if (it == b->allocations.end()) return fail(b, METRALE_STATUS_NOT_FOUND, "mem_free of an unknown pointer");
  std::free(it->second);
  b->allocations.erase(it);
  return METRALE_STATUS_OK;
}

metrale_status copy_to_device(metrale_backend*, uint64_t dst, const void* src, size_t bytes, uint64_t) {
#if defined(FAULT_COPY_THROWS)
  (void)dst, (void)src, (void)bytes;
  throw std::runtime_error("fault plugin: copy_to_device throws on purpose");
#endif
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return METRALE_STATUS_OK;
}
metrale_status copy_to_host(metrale_backend*, void* dst, uint64_t src, size_t bytes, uint64_t) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return METRALE_STATUS_OK;
}
metrale_status copy_device(metrale_backend*, uint64_t dst, uint64_t src, size_t bytes, uint64_t) {
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return METRALE_STATUS_OK;
}
metrale_status memset_device(metrale_backend*, uint64_t dst, uint8_t value, size_t bytes, uint64_t) {
  std::memset(reinterpret_cast<void*>(dst), value, bytes);
  return METRALE_STATUS_OK;
}
metrale_status stream_create(metrale_backend* b, uint64_t* stream) {
#if defined(FAULT_STREAM_THROWS)
  (void)b, (void)stream;
  throw std::runtime_error("fault plugin: stream_create throws on purpose");
#endif
  *stream = b->next_stream++;
  return METRALE_STATUS_OK;
}
metrale_status stream_destroy(metrale_backend*, uint64_t) { return METRALE_STATUS_OK; }
metrale_status stream_synchronize(metrale_backend*, uint64_t) { return METRALE_STATUS_OK; }

// act/silu_mul or act/gelu_mul (gate_up, out, m, i): act(g) * u per row.
void act_mul(bool silu, void* const* args) {
  const auto* gate_up = reinterpret_cast<const uint16_t*>(*static_cast<const uint64_t*>(args[0]));
  auto* out = reinterpret_cast<uint16_t*>(*static_cast<const uint64_t*>(args[1]));
  const uint32_t m = *static_cast<const uint32_t*>(args[2]), inter = *static_cast<const uint32_t*>(args[3]);
  for (size_t r = 0; r < m; ++r) {
    for (size_t j = 0; j < inter; ++j) {
      const float g = metrale::cpu::bf16_to_f32(gate_up[r * 2 * inter + j]);
      const float u = metrale::cpu::bf16_to_f32(gate_up[r * 2 * inter + inter + j]);
      const float act = silu ? g / (1.0f + std::exp(-g))
                             : 0.5f * g * (1.0f + std::tanh(0.7978845608028654f * (g + 0.044715f * g * g * g)));
      out[r * inter + j] = metrale::cpu::f32_to_bf16(act * u);
    }
  }
}

#if defined(FAULT_LAUNCH_RENDEZVOUS)
constexpr uint32_t kRendezvous = 8;

// Returns once kRendezvous launches have been inside launch() together (the one that makes them
// kRendezvous releases the others). A wait that gives up fails this launch and every later one,
// so a runtime that let one launch in at a time fails after one timeout, not one per launch.
metrale_status rendezvous(metrale_backend* b) {
  std::unique_lock lock(b->mutex);
  b->most_inside = std::max(b->most_inside, ++b->inside);
  if (b->inside == kRendezvous) {
    b->all_met = true;
    b->met.notify_all();
  }
  const bool met = !b->gave_up && b->met.wait_for(lock, std::chrono::seconds(20), [&] { return b->all_met; });
  --b->inside;
  if (met) return METRALE_STATUS_OK;
  b->gave_up = true;
  return fail(b, METRALE_STATUS_INTERNAL,
              "fault plugin: gave up waiting for " + std::to_string(kRendezvous) + " launches inside launch() at once; " +
                  "at most " + std::to_string(b->most_inside) + " were (FAULT_LAUNCH_RENDEZVOUS)");
}
#endif

metrale_status launch(metrale_backend* b, uint64_t kernel, const metrale_launch_config* config, void* const* args,
                      size_t arg_count) {
#if defined(FAULT_LAUNCH_THROWS)
  (void)b, (void)kernel, (void)config, (void)args, (void)arg_count;
  throw std::runtime_error("fault plugin: launch throws on purpose");
#endif
  if (kernel == 0 || kernel > b->descs.size()) return fail(b, METRALE_STATUS_NOT_FOUND, "unknown kernel handle");
  size_t index = kernel - 1;
  if (arg_count != b->params[index].size()) return fail(b, METRALE_STATUS_INVALID_ARGUMENT, "wrong argument count");
  ++b->launches;
#if defined(FAULT_LAUNCH_RENDEZVOUS)
  if (metrale_status s = rendezvous(b); s != METRALE_STATUS_OK) return s;
#endif
  if (b->modules[index] == "w4a16" && b->names[index] == "w4a16_gemv") {
    auto arg_ptr = [&](size_t i) { return *static_cast<const uint64_t*>(args[i]); };
    auto arg_u32 = [&](size_t i) { return *static_cast<const uint32_t*>(args[i]); };
    const auto* x = reinterpret_cast<const uint16_t*>(arg_ptr(0));
    const auto* q = reinterpret_cast<const uint32_t*>(arg_ptr(1));
    const auto* scales = reinterpret_cast<const uint16_t*>(arg_ptr(2));
    auto* y = reinterpret_cast<uint16_t*>(arg_ptr(3));
    uint32_t n = arg_u32(5), k = arg_u32(6);
    uint32_t groups = k / 128;
#if defined(FAULT_WRONG_GEMV)
    const uint32_t k_read = k - 8;  // the bug: the last packed word of K is never read
#else
    const uint32_t k_read = k;
#endif
    for (uint32_t row = 0; row < n; ++row) {
      float sum = 0;
      for (uint32_t g = 0; g < groups; ++g) {
        float scale = metrale::cpu::f16_to_f32(scales[size_t{row} * (k / 128) + g]);
        for (uint32_t i = g * 128; i < (g + 1) * 128 && i < k_read; ++i) {
          uint32_t word = q[size_t{row} * (k / 8) + i / 8];
#if defined(FAULT_XOR_LAYOUT)
          word ^= kXorLayout;  // the weights are in layout "fault-xor"
#endif
          uint32_t code = (word >> (4 * (i % 8))) & 0xfu;
          sum += metrale::cpu::bf16_to_f32(x[i]) * (static_cast<float>(code) - 8.0f) * scale;
        }
      }
      y[row] = metrale::cpu::f32_to_bf16(sum);
    }
  } else if (b->modules[index] == "w4a16" && b->names[index] == "w4a16_repack") {
    auto arg_ptr = [&](size_t i) { return *static_cast<const uint64_t*>(args[i]); };
    auto arg_u32 = [&](size_t i) { return *static_cast<const uint32_t*>(args[i]); };
    const auto* q_in = reinterpret_cast<const uint32_t*>(arg_ptr(0));
    const auto* s_in = reinterpret_cast<const uint16_t*>(arg_ptr(1));
    auto* q_out = reinterpret_cast<uint32_t*>(arg_ptr(2));
    auto* s_out = reinterpret_cast<uint16_t*>(arg_ptr(3));
    const size_t rows = size_t{arg_u32(4)} * arg_u32(6), k = arg_u32(5);
    for (size_t i = 0; i < rows * (k / 8); ++i) {
#if defined(FAULT_XOR_LAYOUT)
      q_out[i] = q_in[i] ^ kXorLayout;
#else
      q_out[i] = q_in[i];
#endif
    }
    std::memcpy(s_out, s_in, rows * (k / 128) * sizeof(uint16_t));
  } else if (b->modules[index] == "act" && (b->names[index] == "silu_mul" || b->names[index] == "gelu_mul")) {
    act_mul(b->names[index] == "silu_mul", args);
  } else if (b->modules[index] == "test" && b->names[index] == "fill") {
    auto* out = reinterpret_cast<float*>(*static_cast<const uint64_t*>(args[0]));
    uint32_t n = *static_cast<const uint32_t*>(args[1]);
    float value = *static_cast<const float*>(args[2]);
    // One block covers block[0] elements, as a GPU launch would.
    for (uint32_t block = 0; block < config->grid[0]; ++block)
      for (uint32_t t = 0; t < config->block[0]; ++t)
        if (uint64_t i = uint64_t{block} * config->block[0] + t; i < n) out[i] = value;
  }
  return METRALE_STATUS_OK;
}

// The extensions every variant offers: "fault_answer", a uint32_t(void) returning 42
// (Registry::extension tests), and "fault_destroy_count", a uint32_t(void) returning how many
// instances destroy() has ended.
uint32_t fault_answer() { return 42; }
uint32_t fault_destroy_count() { return destroy_count.load(); }

void* get_proc_address(const char* name) {
  if (std::strcmp(name, "fault_answer") == 0) return reinterpret_cast<void*>(&fault_answer);
  if (std::strcmp(name, "fault_destroy_count") == 0) return reinterpret_cast<void*>(&fault_destroy_count);
  return nullptr;
}

const metrale_plugin_table kTable = {
#if defined(FAULT_SHORT_TABLE)
    METRALE_PLUGIN_TABLE_V1_SIZE,  // built before get_proc_address was appended
#else
    sizeof(metrale_plugin_table),
#endif
#if defined(FAULT_TABLE_VERSION_LIES)
    2,
#else
    1,
#endif
    describe, device_count, create, destroy, last_error, device_info, list_kernels, get_kernel,
    mem_alloc, mem_free, copy_to_device, copy_to_host, copy_device, memset_device,
    stream_create, stream_destroy, stream_synchronize, launch,
    get_proc_address,
};

}  // namespace

#if !defined(FAULT_NO_ENTRY)
extern "C" METRALE_PLUGIN_EXPORT metrale_status metrale_plugin_entry(uint32_t runtime_min, uint32_t runtime_max,
                                                                     uint32_t* chosen,
                                                                     const metrale_plugin_table** table) {
#if defined(FAULT_ABI_TOO_NEW)
  (void)runtime_min, (void)runtime_max, (void)table;
  *chosen = 99;  // speaks only a future ABI
  return METRALE_STATUS_INCOMPATIBLE;
#elif defined(FAULT_ABI_TOO_OLD)
  (void)runtime_min, (void)runtime_max, (void)table;
  *chosen = 0;  // speaks only a pre-release ABI
  return METRALE_STATUS_INCOMPATIBLE;
#elif defined(FAULT_NULL_TABLE)
  (void)runtime_min, (void)runtime_max;
  *chosen = 1;
  *table = nullptr;
  return METRALE_STATUS_OK;
#else
  if (runtime_min > 1 || runtime_max < 1) {
    *chosen = 1;
    return METRALE_STATUS_INCOMPATIBLE;
  }
  *chosen = 1;
  *table = &kTable;
  return METRALE_STATUS_OK;
#endif
}
#else
// Exports something else, so the library loads but has no entry point.
extern "C" METRALE_PLUGIN_EXPORT int metrale_plugin_entry_misspelt() { return 0; }
#endif
