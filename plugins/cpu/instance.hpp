// SPDX-License-Identifier: MIT OR Apache-2.0
// One CPU backend instance: the host's one "device". Memory is host memory, 64-byte aligned and
// tracked so copies and launches can be checked against live allocations. Streams are ids: every
// operation runs to completion, in order, in the calling thread before it returns (kernels on
// the thread pool, which the calling thread joins), so a stream's order holds trivially and
// synchronize has nothing left to wait for. That is a valid stream semantics for a host device;
// it also means operations on different streams do not overlap.
//
// Every method returns a status and, on failure, sets the calling thread's last error for this
// instance. Methods may be called from several threads at once.
#pragma once

#include "kernel_table.hpp"
#include "target.hpp"
#include "thread_pool.hpp"

#include <metrale/plugin_abi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

namespace metrale::cpu {

class Instance final : private MemoryView {
 public:
  // Validates `info` and its options; on failure returns the status and a message.
  static metrale_status create(const metrale_backend_create_info* info,
                               std::unique_ptr<Instance>& out, std::string& error);
  ~Instance();

  metrale_status device_info(metrale_device_info* out);
  metrale_status list_kernels(const metrale_kernel_desc** kernels, size_t* count);
  metrale_status get_kernel(const char* module, const char* name, uint64_t* handle);

  metrale_status mem_alloc(size_t bytes, uint64_t* device_ptr);
  metrale_status mem_free(uint64_t device_ptr);
  metrale_status copy_to_device(uint64_t dst, const void* src, size_t bytes, uint64_t stream);
  metrale_status copy_to_host(void* dst, uint64_t src, size_t bytes, uint64_t stream);
  metrale_status copy_device(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream);
  metrale_status memset_device(uint64_t dst, uint8_t value, size_t bytes, uint64_t stream);
  // The caller's host memory as an allocation (runtime/abi/metrale/cpu_host_memory.h).
  metrale_status host_register(const void* host, size_t bytes, uint64_t* device_ptr, uint32_t* registered);
  metrale_status host_unregister(uint64_t device_ptr);

  metrale_status stream_create(uint64_t* stream);
  metrale_status stream_destroy(uint64_t stream);
  metrale_status stream_synchronize(uint64_t stream);

  metrale_status launch(uint64_t kernel, const metrale_launch_config* config, void* const* args,
                        size_t arg_count);

  // The message of this thread's last failed call on this instance ("" when none). Valid until
  // this thread's next failure on the instance.
  const char* last_error() const;
  // Records a failure for last_error() and returns `status`.
  metrale_status fail(metrale_status status, std::string message) const;

 private:
  struct Options {
    const char* target = nullptr;  // nullptr: auto
    unsigned threads = 0;          // 0: default
    bool pin = false;              // pin each pool worker to one CPU
  };
  struct FreeDeleter {
    void operator()(unsigned char* p) const noexcept;
  };

  Instance(const metrale_host_callbacks* host, Tier tier, CpuFeatures features, unsigned threads,
           bool pin);

  void log(metrale_log_level level, const std::string& message) const;
  // What create() reports once the instance stands: pinning failures, then the debug line
  // naming the CPU, the tier, its int8 dot product and FP8 decoder, and the threads.
  void log_start(bool pin) const;
  uint64_t extent(uint64_t address) const override;
  // Checks [address, address + bytes) lies inside one live allocation; `role` names it in the
  // message ("copy_to_device destination").
  metrale_status check_range(const char* role, uint64_t address, size_t bytes) const;
  metrale_status check_stream(const char* operation, uint64_t stream) const;

  const metrale_host_callbacks* host_;
  Tier tier_;
  CpuFeatures features_;
  std::string device_name_;
  uint64_t memory_bytes_ = 0;
  std::vector<BlockFn> bodies_;  // per kernel_specs() entry, for tier_
  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::unique_ptr<unsigned char, FreeDeleter>> scratch_;  // one per pool slot
  std::vector<unsigned char*> scratch_ptrs_;

  mutable std::shared_mutex memory_mutex_;
  std::map<uint64_t, uint64_t> allocations_;  // address -> bytes requested
  std::set<uint64_t> borrowed_;  // the addresses in allocations_ that host_register added: never freed here

  // Last errors per thread, kept here rather than in thread_local storage so that nothing of the
  // plugin outlives the instance in other threads (and dlclose can unload it). The same holds for
  // all of the plugin: it keeps no thread_local state at all (tests/cpu/test_unload.cpp).
  mutable std::mutex error_mutex_;
  mutable std::map<std::thread::id, std::string> errors_;

  mutable std::mutex stream_mutex_;
  std::set<uint64_t> streams_;
  uint64_t next_stream_ = 1;
};

}  // namespace metrale::cpu
