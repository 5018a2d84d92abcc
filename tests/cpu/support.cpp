// SPDX-License-Identifier: MIT OR Apache-2.0
#include "support.hpp"

#include <dlfcn.h>

#include <map>


namespace cpu_test {

namespace {

void capture_log(void* user, metrale_log_level level, const char* message) {
  auto* log = static_cast<HostLog*>(user);
  std::lock_guard lock(log->mutex);
  log->recorded.push_back({level, message});
}

}  // namespace

HostLog::HostLog() {
  host.struct_size = sizeof host;
  host.user = this;
  host.log = capture_log;
}

std::vector<LogLine> HostLog::lines() const {
  std::lock_guard lock(mutex);
  return recorded;
}

const Plugin& plugin() {
  static const Plugin loaded = [] {
    Plugin p;
    p.library = dlopen(METRALE_CPU_TEST_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (p.library == nullptr) FAIL("dlopen " METRALE_CPU_TEST_PLUGIN ": " << dlerror());
    p.entry = reinterpret_cast<metrale_plugin_entry_fn>(dlsym(p.library, METRALE_PLUGIN_ENTRY_SYMBOL));
    if (p.entry == nullptr) FAIL("no " METRALE_PLUGIN_ENTRY_SYMBOL " in the plugin");
    uint32_t chosen = 0;
    if (p.entry(1, 1, &chosen, &p.table) != METRALE_STATUS_OK || p.table == nullptr)
      FAIL("handshake [1, 1] refused");
    return p;
  }();
  return loaded;
}

Created try_create(const Options& options, HostLog* log, uint32_t device_index) {
  static HostLog shared;
  HostLog* host = log != nullptr ? log : &shared;
  std::vector<metrale_option> raw;
  for (const auto& [key, value] : options) raw.push_back({key.c_str(), value.c_str()});
  metrale_backend_create_info info{};
  info.struct_size = sizeof info;
  info.host = &host->host;
  info.device_index = device_index;
  info.manifest_path = METRALE_CPU_TEST_MANIFEST;
  info.options = raw.empty() ? nullptr : raw.data();
  info.option_count = static_cast<uint32_t>(raw.size());
  Created created;
  std::array<char, 512> error{};
  created.status = plugin().table->create(&info, &created.backend, error.data(), error.size());
  created.error = error.data();
  return created;
}

Backend::Backend(const Options& options) : log_(std::make_unique<HostLog>()) {
  Created created = try_create(options, log_.get());
  REQUIRE_MESSAGE(created.status == METRALE_STATUS_OK, created.error);
  REQUIRE(created.backend != nullptr);
  backend_ = created.backend;
}

Backend::~Backend() {
  for (uint64_t address : allocations_) table().mem_free(backend_, address);
  table().destroy(backend_);
}

uint64_t Backend::alloc(size_t bytes) {
  uint64_t address = 0;
  REQUIRE_MESSAGE(table().mem_alloc(backend_, bytes, &address) == METRALE_STATUS_OK, last_error());
  allocations_.push_back(address);
  return address;
}

void Backend::free(uint64_t address) {
  REQUIRE(table().mem_free(backend_, address) == METRALE_STATUS_OK);
  std::erase(allocations_, address);
}

uint64_t Backend::kernel(const char* module, const char* name) {
  uint64_t handle = 0;
  REQUIRE_MESSAGE(table().get_kernel(backend_, module, name, &handle) == METRALE_STATUS_OK,
                  last_error());
  REQUIRE(handle != 0);
  return handle;
}

metrale_status Backend::launch(uint64_t kernel, std::array<uint32_t, 2> grid, Args& args,
                               uint32_t block, uint64_t stream) {
  metrale_launch_config config{};
  config.grid[0] = grid[0];
  config.grid[1] = grid[1];
  config.grid[2] = 1;
  config.block[0] = block;
  config.block[1] = 1;
  config.block[2] = 1;
  config.stream = stream;
  return table().launch(backend_, kernel, &config, args.data(), args.size());
}

std::string Backend::target() {
  metrale_device_info info{};
  info.struct_size = sizeof info;
  REQUIRE(table().device_info(backend_, &info) == METRALE_STATUS_OK);
  return info.target;
}

Backend& tier_backend(const std::string& tier) {
  static std::map<std::string, std::unique_ptr<Backend>> backends;
  auto& slot = backends[tier];
  if (!slot) slot = std::make_unique<Backend>(Options{{"target", tier}, {"threads", "2"}});
  return *slot;
}

std::vector<std::string> supported_tiers() {
  static const std::vector<std::string> tiers = [] {
    std::vector<std::string> result;
    for (const char* tier : {"baseline", "avx2", "avx512", "avx512bf16"}) {
      Created created = try_create({{"target", tier}, {"threads", "2"}});
      if (created.status == METRALE_STATUS_OK) {
        result.emplace_back(tier);
        plugin().table->destroy(created.backend);
      }
    }
    return result;
  }();
  return tiers;
}

}  // namespace cpu_test
