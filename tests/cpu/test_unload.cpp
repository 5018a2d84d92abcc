// SPDX-License-Identifier: MIT OR Apache-2.0
// The CPU plugin leaves nothing behind in its callers' threads: after instances have launched
// grouped kernels (whose launch collects the experts with rows) from the main thread and from
// another one, and have been destroyed, dlclose really unloads the library. Per-thread storage
// in the plugin (a thread_local with a destructor) would pin it in memory until those threads
// end, contradicting the plugin's own rule (plugins/cpu/instance.hpp: per-thread errors live in
// the instance so that the library can be unloaded).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <metrale/plugin_abi.h>

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <thread>
#include <vector>

namespace {

void quiet_log(void*, metrale_log_level, const char*) {}

struct Loaded {
  void* library = nullptr;
  const metrale_plugin_table* table = nullptr;
};

Loaded load() {
  Loaded l;
  l.library = dlopen(METRALE_CPU_TEST_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  REQUIRE_MESSAGE(l.library != nullptr, dlerror());
  auto entry = reinterpret_cast<metrale_plugin_entry_fn>(dlsym(l.library, METRALE_PLUGIN_ENTRY_SYMBOL));
  REQUIRE((entry != nullptr));
  uint32_t chosen = 0;
  REQUIRE(entry(1, 1, &chosen, &l.table) == METRALE_STATUS_OK);
  return l;
}

// One moe/w4a16_grouped_gemm launch over 2 experts (one with the token, one idle) on zero weights.
void grouped_launch(const metrale_plugin_table& t, metrale_backend* b) {
  constexpr uint32_t n = 64, k = 128, experts = 2;
  uint64_t x = 0, q = 0, s = 0, offsets = 0, y = 0;
  REQUIRE(t.mem_alloc(b, k * 2, &x) == METRALE_STATUS_OK);
  REQUIRE(t.mem_alloc(b, size_t{experts} * n * k / 2, &q) == METRALE_STATUS_OK);
  REQUIRE(t.mem_alloc(b, size_t{experts} * n * (k / 128) * 2, &s) == METRALE_STATUS_OK);
  REQUIRE(t.mem_alloc(b, (experts + 1) * 4, &offsets) == METRALE_STATUS_OK);
  REQUIRE(t.mem_alloc(b, n * 2, &y) == METRALE_STATUS_OK);
  const std::array<int32_t, experts + 1> rows{0, 1, 1};
  REQUIRE(t.copy_to_device(b, offsets, rows.data(), sizeof rows, 0) == METRALE_STATUS_OK);
  uint64_t kernel = 0;
  REQUIRE(t.get_kernel(b, "moe", "w4a16_grouped_gemm", &kernel) == METRALE_STATUS_OK);
  uint32_t nn = n, kk = k, ee = experts;
  void* args[8] = {&x, &q, &s, &offsets, &y, &nn, &kk, &ee};
  const metrale_launch_config config{{1, experts, 1}, {128, 1, 1}, 0, 0};
  CHECK_MESSAGE(t.launch(b, kernel, &config, args, 8) == METRALE_STATUS_OK, t.last_error(b));
  for (uint64_t p : {x, q, s, offsets, y}) CHECK(t.mem_free(b, p) == METRALE_STATUS_OK);
}

}  // namespace

TEST_CASE("after grouped launches from several threads, the CPU plugin unloads") {
  Loaded l = load();
  metrale_host_callbacks host{sizeof(metrale_host_callbacks), nullptr, quiet_log};
  metrale_backend_create_info info{};
  info.struct_size = sizeof info;
  info.host = &host;
  const std::array<metrale_option, 1> options{{{"threads", "2"}}};
  info.options = options.data();
  info.option_count = 1;
  metrale_backend* b = nullptr;
  std::array<char, 256> error{};
  REQUIRE_MESSAGE(l.table->create(&info, &b, error.data(), error.size()) == METRALE_STATUS_OK, error.data());
  grouped_launch(*l.table, b);
  // Another caller thread that stays alive past the unload, as a host's worker thread would.
  std::thread other;
  std::atomic<bool> launched{false}, release{false};
  other = std::thread([&] {
    grouped_launch(*l.table, b);
    launched = true;
    while (!release) std::this_thread::yield();
  });
  while (!launched) std::this_thread::yield();
  l.table->destroy(b);
  REQUIRE(dlclose(l.library) == 0);
  const bool still_mapped = dlopen(METRALE_CPU_TEST_PLUGIN, RTLD_NOW | RTLD_NOLOAD) != nullptr;
  release = true;
  other.join();
  CHECK_MESSAGE(!still_mapped, "dlclose did not unload the plugin: something of it outlives its instances");
}
