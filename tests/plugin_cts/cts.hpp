// SPDX-License-Identifier: MIT OR Apache-2.0
// The plugin conformance suite's harness: what the suite was told (the plugin's manifest and what
// create() needs), the library loaded through the raw C ABI as the runtime loads it, instances,
// and skips that say why. The contract itself: docs/plugin-abi.md, "The contract".
#pragma once

#include <metrale/manifest.hpp>
#include <metrale/plugin_abi.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cts {

using Options = std::vector<std::pair<std::string, std::string>>;

// The command line (docs/plugin-abi.md, "Conformance suite").
struct Config {
  std::string manifest;                       // --manifest PATH (required)
  Options options;                            // --option KEY=VALUE: create() options
  std::vector<std::string> kernel_source_dirs;  // --kernel-source-dir DIR
  std::optional<std::string> cache_dir;       // --cache-dir DIR
  std::vector<std::string> extensions;        // --extension NAME: get_proc_address must answer it
  bool expect_device = false;                 // --expect-device: create() must succeed here
};
const Config& config();

// The manifest, validated by the runtime's own reader, and its JSON (for "targets").
const metrale::Manifest& manifest();
const nlohmann::json& manifest_json();

// The library named by the manifest, dlopen()ed once; entry answered by dlsym.
struct Library {
  void* handle = nullptr;
  metrale_plugin_entry_fn entry = nullptr;
  const metrale_plugin_table* table = nullptr;  // from the handshake at [abi, abi]
};
const Library& library();
inline const metrale_plugin_table& table() { return *library().table; }

// "OK", "NOT_FOUND", ... for messages (a std::string: doctest prints a char* as an address).
std::string status_name(metrale_status status);

// Records a check the plugin cannot meet here, printed at once and in the final summary.
void skip(const std::string& check, const std::string& reason);
// Every skip so far, as "check: reason".
std::vector<std::string> skips();
// True when the instance checks were skipped because no instance could be created.
bool device_missing();

// Log lines a plugin writes through the host callbacks.
class HostLog {
 public:
  HostLog();
  HostLog(const HostLog&) = delete;
  HostLog& operator=(const HostLog&) = delete;
  const metrale_host_callbacks* callbacks() const { return &host_; }
  bool mentions(const std::string& text) const;

 private:
  static void log(void* user, metrale_log_level level, const char* message);
  metrale_host_callbacks host_{};
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

// One create(); destroys the instance at scope exit.
class Instance {
 public:
  explicit Instance(const Options& extra = {}, uint32_t device_index = 0);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  metrale_backend* raw() const { return backend_; }
  const metrale_plugin_table& t() const { return table(); }
  std::string last_error() const;
  const HostLog& log() const { return *log_; }

  metrale_status status = METRALE_STATUS_INTERNAL;
  std::string create_error;

 private:
  std::unique_ptr<HostLog> log_;
  metrale_backend* backend_ = nullptr;
};

// The instance the instance-level checks share, or null when the plugin cannot create one here
// (the check is then recorded as skipped with create()'s answer; a failure under --expect-device).
Instance* device(const std::string& check);
// Destroys the shared instance (main() does, after the cases).
void release_device();

// A failed call must leave a message: last_error is never NULL, and not empty after a failure.
void check_last_error_set(const Instance& instance, const char* call);

// An instance call that must fail with `expected` and leave a message.
#define CTS_CHECK_FAILS(instance, call, expected)                                                         \
  do {                                                                                                   \
    const metrale_status cts_status_ = (call);                                                          \
    CHECK_MESSAGE(cts_status_ == (expected), #call " answered " << ::cts::status_name(cts_status_) \
                                                  << ", the contract says " << ::cts::status_name(expected)); \
    ::cts::check_last_error_set((instance), #call);                                                      \
  } while (0)

// Launch arguments in cuLaunchKernel's convention: one 8-byte slot per parameter, `pointer` for
// each pointer parameter, 0 for every scalar (no work to do, should a launch get that far).
class Args {
 public:
  Args(const std::vector<metrale::KernelParam>& params, uint64_t pointer, size_t extra = 0) {
    for (const auto& p : params) slots_.push_back(p.type == METRALE_PARAM_PTR ? pointer : 0);
    slots_.resize(slots_.size() + extra, 0);
    for (auto& slot : slots_) pointers_.push_back(&slot);
  }
  void* const* data() const { return pointers_.data(); }
  void set_null(size_t i) { pointers_[i] = nullptr; }

 private:
  std::vector<uint64_t> slots_;
  std::vector<void*> pointers_;
};

// "module/name" of a kernel description.
inline std::string key(const metrale_kernel_desc& k) { return std::string(k.module) + "/" + k.name; }

}  // namespace cts
