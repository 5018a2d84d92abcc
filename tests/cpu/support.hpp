// SPDX-License-Identifier: MIT OR Apache-2.0
// Test support for the CPU plugin: loads the built module through the raw C ABI (dlopen +
// metrale_plugin_entry, as a runtime would) and wraps an instance for the tests. The number
// formats here are written independently of the plugin's (tests must not share its code).
#pragma once

#include <metrale/plugin_abi.h>

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace cpu_test {

// ------------------------------------------------------------------ number formats
inline double bf16_value(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

// Nearest bf16 (ties to even) of a finite double, via the exact float.
inline uint16_t to_bf16(double value) {
  const float f = static_cast<float>(value);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lower = u & 0xffffu;
  uint32_t upper = u >> 16;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) ++upper;
  return static_cast<uint16_t>(upper);
}

inline double f16_value(uint16_t bits) {
  const int sign = (bits & 0x8000) ? -1 : 1;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// ------------------------------------------------------------------ plugin access
struct Plugin {
  void* library = nullptr;
  metrale_plugin_entry_fn entry = nullptr;
  const metrale_plugin_table* table = nullptr;
};
// The plugin, loaded once per process; the handshake offers [1, 1].
const Plugin& plugin();

struct LogLine {
  metrale_log_level level;
  std::string text;
};

using Options = std::vector<std::pair<std::string, std::string>>;

// Host callbacks that record the plugin's log lines; must outlive the instances given it.
struct HostLog {
  HostLog();
  HostLog(const HostLog&) = delete;
  HostLog& operator=(const HostLog&) = delete;
  std::vector<LogLine> lines() const;

  metrale_host_callbacks host{};
  mutable std::mutex mutex;
  std::vector<LogLine> recorded;
};

// create() with these options; returns the status, the instance (or null) and the message.
// Without a HostLog the lines go to a process-wide one.
struct Created {
  metrale_status status = METRALE_STATUS_INTERNAL;
  metrale_backend* backend = nullptr;
  std::string error;
};
Created try_create(const Options& options, HostLog* log = nullptr, uint32_t device_index = 0);

// Arguments in cuLaunchKernel's convention: each value in its own 8-byte slot.
class Args {
 public:
  Args& ptr(uint64_t address) { return put(&address, 8); }
  Args& u32(uint32_t value) { return put(&value, 4); }
  Args& f32(float value) { return put(&value, 4); }
  void* const* data() {
    pointers_.clear();
    for (auto& slot : slots_) pointers_.push_back(slot.data());
    return pointers_.data();
  }
  size_t size() const { return slots_.size(); }

 private:
  Args& put(const void* value, size_t bytes) {
    std::array<unsigned char, 8> slot{};
    std::memcpy(slot.data(), value, bytes);
    slots_.push_back(slot);
    return *this;
  }
  std::vector<std::array<unsigned char, 8>> slots_;
  std::vector<void*> pointers_;
};

// One instance; every failing call is a test failure unless the test uses the raw table.
class Backend {
 public:
  explicit Backend(const Options& options = {});
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  metrale_backend* raw() const { return backend_; }
  const metrale_plugin_table& table() const { return *plugin().table; }
  std::string last_error() const { return table().last_error(backend_); }
  std::vector<LogLine> log() const { return log_->lines(); }

  uint64_t alloc(size_t bytes);
  void free(uint64_t address);
  template <class T>
  uint64_t upload(const std::vector<T>& values) {
    const uint64_t address = alloc(values.size() * sizeof(T));
    REQUIRE(table().copy_to_device(backend_, address, values.data(), values.size() * sizeof(T), 0) ==
            METRALE_STATUS_OK);
    return address;
  }
  template <class T>
  std::vector<T> download(uint64_t address, size_t count) {
    std::vector<T> values(count);
    REQUIRE(table().copy_to_host(backend_, values.data(), address, count * sizeof(T), 0) ==
            METRALE_STATUS_OK);
    return values;
  }
  uint64_t kernel(const char* module, const char* name);
  metrale_status launch(uint64_t kernel, std::array<uint32_t, 2> grid, Args& args,
                        uint32_t block = 128, uint64_t stream = 0);
  std::string target();

 private:
  std::unique_ptr<HostLog> log_;  // destroyed after the instance
  metrale_backend* backend_ = nullptr;
  std::vector<uint64_t> allocations_;
};

// One instance per tier ("threads" 2) for the whole process: creating pools per case would
// dominate the tests' time.
Backend& tier_backend(const std::string& tier);

// Targets (option values) this CPU supports, lowest first, as the plugin reports them.
std::vector<std::string> supported_tiers();

inline uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

}  // namespace cpu_test
