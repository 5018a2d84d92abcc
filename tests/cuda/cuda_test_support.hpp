// SPDX-License-Identifier: MIT OR Apache-2.0
// Shared by the CUDA plugin's tests: the real plugin loaded through its C ABI, driven against the
// fake driver (tests/fakes) whose behaviour each test sets through FAKECUDA_* variables.
#pragma once

#include <metrale/cuda_compile.h>
#include <metrale/plugin_abi.h>

#include <dlfcn.h>
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../support/test_support.hpp"  // EnvGuard, TempDir

namespace metrale::cuda_test {

namespace fs = std::filesystem;

inline std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The plugin under test, loaded once per process like the runtime loads it.
struct Plugin {
  void* library = nullptr;
  const metrale_plugin_table* table = nullptr;
  metrale_cuda_compile_fn compile = nullptr;
  metrale_cuda_compile_free_fn compile_free = nullptr;

  static const Plugin& get() {
    static const Plugin plugin = [] {
      Plugin p;
      p.library = dlopen(METRALE_TEST_CUDA_PLUGIN, RTLD_NOW | RTLD_LOCAL);
      REQUIRE_MESSAGE(p.library != nullptr, dlerror());
      auto entry = reinterpret_cast<metrale_plugin_entry_fn>(dlsym(p.library, METRALE_PLUGIN_ENTRY_SYMBOL));
      REQUIRE(static_cast<bool>(entry));
      uint32_t chosen = 0;
      REQUIRE(entry(1, 1, &chosen, &p.table) == METRALE_STATUS_OK);
      REQUIRE(chosen == 1);
      // The compile extension: through the table, not as exported symbols.
      REQUIRE(METRALE_STRUCT_HAS(metrale_plugin_table, p.table, get_proc_address));
      REQUIRE(static_cast<bool>(p.table->get_proc_address));
      p.compile = reinterpret_cast<metrale_cuda_compile_fn>(p.table->get_proc_address(METRALE_CUDA_COMPILE_NAME));
      p.compile_free =
          reinterpret_cast<metrale_cuda_compile_free_fn>(p.table->get_proc_address(METRALE_CUDA_COMPILE_FREE_NAME));
      REQUIRE(static_cast<bool>(p.compile));
      REQUIRE(static_cast<bool>(p.compile_free));
      return p;
    }();
    return plugin;
  }
};

// Messages the plugin logs through the host callback.
class LogCapture {
 public:
  static void callback(void* user, metrale_log_level level, const char* message) {
    auto* self = static_cast<LogCapture*>(user);
    std::lock_guard lock(self->mutex_);
    self->messages_.emplace_back(level, message);
  }
  bool contains(metrale_log_level level, const std::string& text) const {
    std::lock_guard lock(mutex_);
    for (const auto& [l, m] : messages_) {
      if (l == level && m.find(text) != std::string::npos) return true;
    }
    return false;
  }
  std::string dump() const {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& [l, m] : messages_) {
      out += '[';
      out += std::to_string(static_cast<int>(l));
      out += "] ";
      out += m;
      out += '\n';
    }
    return out;
  }
  void clear() {
    std::lock_guard lock(mutex_);
    messages_.clear();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<metrale_log_level, std::string>> messages_;
};

// Sets FAKECUDA_* (and other) variables for one scope and restores them after.
using Env = metrale::testing::EnvGuard;

struct CreateOptions {
  std::optional<std::string> driver = std::string(METRALE_TEST_FAKE_DRIVER);
  std::vector<std::string> source_dirs = {METRALE_TEST_KERNEL_SRC};
  std::optional<std::string> cache_dir;
  std::string manifest_json = read_text(METRALE_TEST_CUDA_MANIFEST);
  uint32_t device_index = 0;
};

// One backend instance; destroyed at scope exit.
class Instance {
 public:
  explicit Instance(const CreateOptions& options = {}) {
    const auto& t = *Plugin::get().table;
    host_.struct_size = sizeof(host_);
    host_.user = &log;
    host_.log = &LogCapture::callback;
    std::vector<metrale_option> opts;
    if (options.driver) opts.push_back({"driver", options.driver->c_str()});
    std::vector<const char*> dirs;
    for (const auto& d : options.source_dirs) dirs.push_back(d.c_str());
    metrale_backend_create_info info{};
    info.struct_size = sizeof(info);
    info.host = &host_;
    info.device_index = options.device_index;
    info.cache_dir = options.cache_dir ? options.cache_dir->c_str() : nullptr;
    info.kernel_source_dirs = dirs.data();
    info.kernel_source_dir_count = static_cast<uint32_t>(dirs.size());
    info.manifest_path = METRALE_TEST_CUDA_MANIFEST;
    info.manifest_json = options.manifest_json.c_str();
    info.options = opts.data();
    info.option_count = static_cast<uint32_t>(opts.size());
    char error[2048] = {};
    status = t.create(&info, &backend, error, sizeof(error));
    create_error = error;
  }
  ~Instance() {
    if (backend != nullptr) Plugin::get().table->destroy(backend);
  }
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  const metrale_plugin_table& t() const { return *Plugin::get().table; }
  std::string last_error() const { return t().last_error(backend); }

  // get_kernel with the status; the handle is 0 unless OK.
  metrale_status kernel(const char* module, const char* name, uint64_t& handle) const {
    handle = 0;
    return t().get_kernel(backend, module, name, &handle);
  }

  metrale_device_info device() const {
    metrale_device_info info{};
    REQUIRE(t().device_info(backend, &info) == METRALE_STATUS_OK);
    return info;
  }

  LogCapture log;
  metrale_status status = METRALE_STATUS_INTERNAL;
  metrale_backend* backend = nullptr;
  std::string create_error;

 private:
  metrale_host_callbacks host_{};
};

// One line of the fake driver's record file, split into "kind" and key=value fields.
struct Record {
  std::string kind;
  std::string name;  // second word for launch/function lines
  std::map<std::string, std::string> fields;
};

inline std::vector<Record> read_records(const fs::path& file) {
  std::vector<Record> records;
  std::istringstream in(read_text(file));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    Record r;
    words >> r.kind;
    std::string word;
    while (words >> word) {
      const auto eq = word.find('=');
      if (eq == std::string::npos) r.name = word;
      else r.fields[word.substr(0, eq)] = word.substr(eq + 1);
    }
    records.push_back(std::move(r));
  }
  return records;
}

}  // namespace metrale::cuda_test
