// SPDX-License-Identifier: MIT OR Apache-2.0
// The CUDA backend through the real runtime: discovery of its manifest, METRALE_CUDA_DRIVER and
// METRALE_CUDA_DEVICE (declared by the manifest) reaching create(), "unavailable" without a driver
// (and a refusal when cuda was asked for), gating by target with the audit's reason, a typed
// launch, and the compile extension through the registry with no driver at all.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "cuda_test_support.hpp"

#include "test_support.hpp"

#include <metrale/levers.hpp>
#include <metrale/registry.hpp>

using namespace metrale;
using namespace metrale::cuda_test;
using metrale::testing::EnvGuard;
using metrale::testing::TempDir;

namespace {

Registry discover_cuda() {
  DiscoveryOptions options;
  options.manifests = std::vector<fs::path>{METRALE_TEST_CUDA_MANIFEST};
  return Registry::discover(options);
}

const RegistryEntry& cuda_entry(const Registry& registry) {
  REQUIRE(registry.entries().size() == 1);
  CHECK(registry.entries()[0].backend == "cuda");
  return registry.entries()[0];
}

}  // namespace

TEST_CASE("without a driver the CUDA backend is unavailable with the reason; asking for it is a refusal") {
  TempDir cache;
  EnvGuard env({{"METRALE_CUDA_DRIVER", "/nonexistent/libcuda.so.1"},
                {"METRALE_CACHE_DIR", cache.path().string()},
                {"METRALE_BACKEND", std::nullopt}});
  const Registry registry = discover_cuda();
  const auto& entry = cuda_entry(registry);
  CHECK(entry.state == EntryState::unavailable);
  CHECK(entry.reason.find("no CUDA driver") != std::string::npos);
  CHECK(entry.reason.find("/nonexistent/libcuda.so.1") != std::string::npos);
  CHECK(registry.find("cuda") == nullptr);
  CHECK_THROWS_AS(registry.select(std::string("cuda")), Refusal);
}

TEST_CASE("with a driver (the fake): loaded, target from the device, kernels gated by min_target") {
  TempDir cache;
  TempDir records;
  for (const auto& [cc, target] : {std::pair{"8.0", "sm_80"}, std::pair{"9.0", "sm_90a"}}) {
    CAPTURE(cc);
    const fs::path log = records / (std::string("driver-") + cc + ".log");
    EnvGuard env({{"METRALE_CUDA_DRIVER", METRALE_TEST_FAKE_DRIVER},
                  {"METRALE_CACHE_DIR", cache.path().string()},
                  {"METRALE_KERNEL_SRC", std::nullopt},
                  {"METRALE_CUDA_DEVICE", "1"},
                  {"FAKECUDA_DEVICES", "2"},
                  {"FAKECUDA_CC", std::string("7.5,") + cc},
                  {"FAKECUDA_FAIL", std::nullopt},
                  {"FAKECUDA_LOG", log.string()}});
    const Registry registry = discover_cuda();
    const auto& entry = cuda_entry(registry);
    REQUIRE_MESSAGE(entry.state == EntryState::loaded, entry.reason);
    CHECK(entry.cross_check.empty());  // everything listed is provided, with the same parameters
    auto backend = registry.select();
    REQUIRE(backend != nullptr);
    CHECK(backend->name() == "cuda");
    CHECK(backend->target() == target);  // device 1, by METRALE_CUDA_DEVICE

    const KernelHandle v3 = backend->try_kernel("w4a16_v3", "w4a16_gemm_t_m128_v3");
    const auto rows = registry.audit()->snapshot();
    REQUIRE(!rows.empty());
    if (std::string(cc) == "8.0") {
      CHECK_FALSE(v3);
      CHECK(rows.back().outcome == LookupOutcome::null_handle);
      CHECK(rows.back().reason.find("sm_90") != std::string::npos);
      CHECK(rows.back().target == "sm_80");
    } else {
      CHECK(v3);
      CHECK(rows.back().outcome == LookupOutcome::resolved);
    }

    // A typed launch through the runtime reaches the driver with the values given.
    const KernelHandle silu = backend->kernel("act", "silu_mul");
    const DevicePtr in = backend->alloc(4 * 2 * 300 * 2);
    const DevicePtr out = backend->alloc(4 * 300 * 2);
    LaunchShape shape;
    shape.grid = {1, 4, 1};
    shape.block = {256, 1, 1};
    backend->launch(silu, shape, in, out, uint32_t{4}, uint32_t{300});
    backend->synchronize();
    bool launched = false;
    for (const auto& r : read_records(log)) {
      if (r.kind != "launch") continue;
      launched = true;
      CHECK(r.name == "silu_mul");
      CHECK(r.fields.at("grid") == "1,4,1");
      CHECK(r.fields.at("args").ends_with(",0x4,0x12c"));
    }
    CHECK(launched);
    backend->free(in);
    backend->free(out);
  }
}

TEST_CASE("the manifest declares the CUDA levers; a bad device index is a refusal naming the manifest") {
  {
    EnvGuard env({{"METRALE_CUDA_DEVICE", "first"}, {"METRALE_CUDA_DRIVER", METRALE_TEST_FAKE_DRIVER}});
    CHECK_THROWS_WITH_AS(discover_cuda(),
                         doctest::Contains("METRALE_CUDA_DEVICE=\"first\" is not valid: expected an unsigned 32-bit "
                                           "integer (lever declared by backend cuda in manifest "),
                         Refusal);
  }
  for (const char* name : {"METRALE_CUDA_DEVICE", "METRALE_CUDA_DRIVER"}) {
    const LeverSpec* spec = find_lever(name);
    REQUIRE_MESSAGE(spec != nullptr, name);
    CHECK(spec->declared_by == "backend cuda");
    CHECK(spec->declared_in == fs::path(METRALE_TEST_CUDA_MANIFEST).lexically_normal().string());
  }
  CHECK(find_lever("METRALE_CUDA_DRIVER")->path_like);
  CHECK_FALSE(find_lever("METRALE_CUDA_DEVICE")->path_like);
}

TEST_CASE("the compile extension through the registry: offered without a driver, refused when disabled") {
  TempDir cache;
  SUBCASE("no driver: the backend is unavailable, its library still offers the extension") {
    EnvGuard env({{"METRALE_CUDA_DRIVER", "/nonexistent/libcuda.so.1"}, {"METRALE_BACKENDS_DISABLE", std::nullopt}});
    const Registry registry = discover_cuda();
    REQUIRE(cuda_entry(registry).state == EntryState::unavailable);
    const Extension compile = registry.extension("cuda", METRALE_CUDA_COMPILE_NAME);
    const Extension compile_free = registry.extension("cuda", METRALE_CUDA_COMPILE_FREE_NAME);
    REQUIRE(compile.address != nullptr);
    CHECK(compile.manifest.backend == "cuda");
    const std::string dir = METRALE_TEST_KERNEL_SRC;
    const char* dirs[] = {dir.c_str()};
    const char* modules[] = {"act"};
    const std::string cache_dir = cache.path().string();
    metrale_cuda_compile_request request{};
    request.struct_size = sizeof(request);
    request.target = "sm_80";
    request.manifest_json = compile.manifest.text.c_str();
    request.kernel_source_dirs = dirs;
    request.kernel_source_dir_count = 1;
    request.cache_dir = cache_dir.c_str();
    request.modules = modules;
    request.module_count = 1;
    char error[1024] = {};
    metrale_cuda_compile_result* result = nullptr;
    REQUIRE_MESSAGE(compile.as<metrale_cuda_compile_fn>()(&request, &result, error, sizeof(error)) ==
                        METRALE_STATUS_OK, error);
    REQUIRE(result->module_count == 1);
    CHECK(result->modules[0].status == METRALE_STATUS_OK);
    compile_free.as<metrale_cuda_compile_free_fn>()(result);
    CHECK_THROWS_WITH_AS(registry.extension("cuda", "metrale_cuda_nothing"),
                         doctest::Contains("offers no extension of that name"), Error);
  }
  SUBCASE("METRALE_BACKENDS_DISABLE=cuda: a refusal naming the lever and its value") {
    EnvGuard env({{"METRALE_BACKENDS_DISABLE", "cu*"}});
    const Registry registry = discover_cuda();
    REQUIRE(cuda_entry(registry).state == EntryState::disabled);
    CHECK_THROWS_WITH_AS(registry.extension("cuda", METRALE_CUDA_COMPILE_NAME),
                         doctest::Contains("disabled by METRALE_BACKENDS_DISABLE=cu*"), Refusal);
  }
}
