// SPDX-License-Identifier: MIT OR Apache-2.0
// Every call into a plugin goes through one guard: a C++ exception thrown across the C ABI (from
// mem_alloc, copy_to_device, stream_create, launch, destroy) becomes an Error naming the backend,
// the plugin, the entry point and the exception's message, never a crash, and the backend keeps
// working; a failing call reports the plugin's own status and last_error() (alloc is not always
// "out of memory"); an instance is destroyed exactly once, also when the Backend cannot be built.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <metrale/registry.hpp>

#include "test_support.hpp"

#include <dlfcn.h>

#include <functional>

using namespace metrale;
using namespace metrale::testing;
namespace fs = std::filesystem;

namespace {


nlohmann::json fill_kernel() {
  return {{"name", "fill"},
          {"params", {{{"name", "out"}, {"type", "ptr"}}, {{"name", "n"}, {"type", "u32"}}, {{"name", "value"}, {"type", "f32"}}}}};
}

Registry discover_variant(const TempDir& dir, const std::string& variant) {
  auto json = manifest_json("fault", fault_plugin(variant), 1, {{"test", nlohmann::json::array({fill_kernel()})}});
  DiscoveryOptions options;
  options.manifests = std::vector<fs::path>{write_file(dir / (variant + ".json"), json.dump())};
  return Registry::discover(options);
}

// The Error `call` throws, checked to be one, with its status and message.
Error error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("not a metrale::Error: " << e.what());
  }
  FAIL("no error");
  return Error(Status::ok, "");
}

// The plugin's own count of destroy() calls, through its extension. Holding the library open
// keeps the counter alive while registries and backends come and go.
class DestroyCounter {
 public:
  explicit DestroyCounter(const std::string& variant) : handle_(dlopen(fault_plugin(variant).c_str(), RTLD_NOW | RTLD_LOCAL)) {
    REQUIRE(handle_);
    auto entry = reinterpret_cast<metrale_plugin_entry_fn>(dlsym(handle_, METRALE_PLUGIN_ENTRY_SYMBOL));
    REQUIRE((entry != nullptr));
    uint32_t chosen = 0;
    const metrale_plugin_table* table = nullptr;
    REQUIRE(entry(1, 1, &chosen, &table) == METRALE_STATUS_OK);
    count_ = reinterpret_cast<uint32_t (*)()>(table->get_proc_address("fault_destroy_count"));
    REQUIRE((count_ != nullptr));
  }
  ~DestroyCounter() { dlclose(handle_); }
  DestroyCounter(const DestroyCounter&) = delete;
  DestroyCounter& operator=(const DestroyCounter&) = delete;
  uint32_t operator()() const { return count_(); }

 private:
  void* handle_;
  uint32_t (*count_)() = nullptr;
};

}  // namespace

TEST_CASE("an exception thrown across the C ABI is a named Error, and the backend keeps working") {
  TempDir dir;
  struct Case {
    std::string variant;
    std::string entry;  // as the message names the entry point
    std::function<void(Backend&)> call;
  };
  const std::vector<Case> cases{
      {"alloc_throws", "mem_alloc(64)", [](Backend& b) { b.alloc(64); }},
      {"copy_throws", "copy_to_device(16 bytes)",
       [](Backend& b) {
         const std::array<uint8_t, 16> bytes{};
         DevicePtr p = b.alloc(16);
         try {
           b.copy_to_device(p, bytes.data(), bytes.size());
         } catch (...) {
           b.free(p);  // the backend still answers after the throw
           throw;
         }
       }},
      {"stream_throws", "stream_create()", [](Backend& b) { b.stream_create(); }},
      {"launch_throws", "launch(test/fill)",
       [](Backend& b) {
         KernelHandle fill = b.kernel("test", "fill");
         DevicePtr p = b.alloc(64);
         b.launch(fill, LaunchShape{}, p, uint32_t{16}, 1.0f);
       }},
  };
  for (const auto& c : cases) {
    CAPTURE(c.variant);
    auto registry = discover_variant(dir, c.variant);
    auto backend = registry.select("fault");
    const Error e = error_of([&] { c.call(*backend); });
    const std::string message = e.what();
    CHECK(e.status() == Status::internal);
    CHECK_MESSAGE(message.find("backend fault (plugin " + fault_plugin(c.variant).string() + "): " + c.entry +
                               " let an exception escape the C ABI") == 0, message);
    CHECK_MESSAGE(message.find("fault plugin: ") != std::string::npos, message);
    CHECK_MESSAGE(message.find("throws on purpose") != std::string::npos, message);
    // Still usable: another call goes through.
    CHECK(backend->try_kernel("test", "fill"));
  }
}

TEST_CASE("a failing call reports the plugin's own status and message") {
  TempDir dir;
  auto registry = discover_variant(dir, "alloc_refuses");
  auto backend = registry.select("fault");
  DevicePtr small = backend->alloc(64);
  CHECK(small);
  const Error e = error_of([&] { backend->alloc(size_t{2} << 20); });
  CHECK(e.status() == Status::invalid_argument);  // not out-of-memory: the plugin said otherwise
  CHECK(std::string(e.what()) ==
        "backend fault (plugin " + fault_plugin("alloc_refuses").string() +
            "): mem_alloc(2097152) failed (invalid-argument): fault plugin: mem_alloc refuses more than 1 MiB "
            "(FAULT_ALLOC_REFUSES)");
  const Error freed = error_of([&] { backend->free(DevicePtr{12345}); });
  CHECK(freed.status() == Status::not_found);
  CHECK(std::string(freed.what()).find("mem_free() failed (not-found): mem_free of an unknown pointer") != std::string::npos);
  backend->free(small);
}

TEST_CASE("an instance is destroyed exactly once: with its Backend, or when the Backend cannot be built") {
  TempDir dir;
  {
    const DestroyCounter destroyed("device_info_fails");
    auto registry = discover_variant(dir, "device_info_fails");
    const auto& entry = registry.entries().front();
    CHECK(entry.state == EntryState::failed);
    CHECK_MESSAGE(entry.reason.find("device_info() failed (internal): fault plugin: no device info (FAULT_DEVICE_INFO_FAILS)") !=
                      std::string::npos,
                  entry.reason);
    CHECK(destroyed() == 1);
  }
  {
    const DestroyCounter destroyed("good");
    auto registry = discover_variant(dir, "good");
    auto backend = registry.select("fault");
    CHECK(destroyed() == 0);
    registry = Registry();  // the registry lets go; `backend` still owns the instance
    CHECK(destroyed() == 0);
    backend.reset();
    CHECK(destroyed() == 1);
  }
}

TEST_CASE("destroy() that throws is logged, not thrown, and the process goes on") {
  TempDir dir;
  {
    auto registry = discover_variant(dir, "destroy_throws");
    auto backend = registry.select("fault");
    CHECK(backend->alloc(8));
  }  // the instance is destroyed here; the exception stops at the guard
  auto registry = discover_variant(dir, "good");
  CHECK(registry.select("fault")->alloc(8));
}
