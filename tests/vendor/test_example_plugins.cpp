// SPDX-License-Identifier: MIT OR Apache-2.0
// The example plugins authors copy, through the runtime: the skeleton backend (plugins/skeleton) and
// the minimal C plugin of docs/plugin-abi.md each load through their manifest with no cross-check
// complaint, and their one kernel computes what it should through a typed launch. Their ABI
// contract is the conformance suite's (tests/plugin_cts).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <metrale/registry.hpp>

#include <array>
#include <vector>

using namespace metrale;

namespace {

// The one backend a manifest names, loaded through the runtime's registry.
std::shared_ptr<Backend> load(const char* manifest, const char* backend) {
  DiscoveryOptions options;
  options.manifests = std::vector<std::filesystem::path>{manifest};
  auto registry = Registry::discover(options);
  REQUIRE(registry.entries().size() == 1);
  const auto& entry = registry.entries()[0];
  INFO("state reason: " << entry.reason);
  REQUIRE(entry.state == EntryState::loaded);
  CHECK(entry.cross_check.empty());
  return registry.select(backend);
}

}  // namespace

TEST_CASE("the skeleton backend loads, answers lookups and runs fill_u32") {
  auto backend = load(SKELETON_MANIFEST, "skeleton");
  CHECK(backend->target() == "skeleton-host");
  CHECK(backend->plugin_version() == "0.1.0");

  constexpr std::array<metrale_param_type, 3> sig{METRALE_PARAM_PTR, METRALE_PARAM_U32, METRALE_PARAM_U32};
  const KernelHandle fill = backend->kernel("skeleton", "fill_u32", sig);
  REQUIRE(fill);
  CHECK(backend->kernel_name(fill) == "skeleton/fill_u32");
  CHECK_FALSE(backend->try_kernel("skeleton", "fill_u64"));
  CHECK_THROWS_WITH_AS(backend->kernel("skeleton", "fill_u64"), doctest::Contains("not in manifest"), Error);

  constexpr uint32_t count = 1000;
  DevicePtr buffer = backend->alloc((count + 1) * 4);
  backend->memset(buffer, 0, (count + 1) * 4);
  LaunchShape shape;
  backend->launch(fill, shape, buffer, uint32_t{0xdecafbad}, count);
  backend->synchronize();
  std::vector<uint32_t> got(count + 1);
  backend->copy_to_host(got.data(), buffer, got.size() * 4);
  backend->free(buffer);
  for (uint32_t i = 0; i < count; ++i) REQUIRE(got[i] == 0xdecafbadu);
  CHECK(got[count] == 0u);  // wrote exactly count elements
  // A launch with the wrong argument types is caught before the plugin sees it.
  CHECK_THROWS_AS(backend->launch(fill, shape, buffer, uint64_t{1}, count), Error);
}

TEST_CASE("the minimal C plugin loads and scale_f32 scales exactly count floats") {
  auto backend = load(MINIMAL_MANIFEST, "minimal");
  CHECK(backend->target() == "minimal-host");
  constexpr std::array<metrale_param_type, 3> sig{METRALE_PARAM_PTR, METRALE_PARAM_F32, METRALE_PARAM_U32};
  const KernelHandle scale = backend->kernel("minimal", "scale_f32", sig);
  REQUIRE(scale);
  constexpr uint32_t count = 100;
  std::vector<float> values(count + 1);
  for (uint32_t i = 0; i <= count; ++i) values[i] = static_cast<float>(i) - 40.5f;
  DevicePtr buffer = backend->alloc(values.size() * sizeof(float));
  backend->copy_to_device(buffer, values.data(), values.size() * sizeof(float));
  backend->launch(scale, LaunchShape{}, buffer, -0.5f, count);
  backend->synchronize();
  std::vector<float> got(values.size());
  backend->copy_to_host(got.data(), buffer, got.size() * sizeof(float));
  backend->free(buffer);
  for (uint32_t i = 0; i < count; ++i) REQUIRE(got[i] == values[i] * -0.5f);
  CHECK(got[count] == values[count]);  // exactly count elements
}
