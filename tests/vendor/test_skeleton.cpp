// SPDX-License-Identifier: MIT OR Apache-2.0
// The skeleton backend (plugins/skeleton), which plugin authors copy: it loads through its
// manifest with no cross-check complaint, answers lookups (and says why for a kernel it lacks),
// and its one kernel writes what it should through a typed launch.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <metrale/registry.hpp>

#include <array>
#include <vector>

using namespace metrale;

TEST_CASE("the skeleton backend loads, answers lookups and runs fill_u32") {
  DiscoveryOptions options;
  options.manifests = std::vector<std::filesystem::path>{SKELETON_MANIFEST};
  auto registry = Registry::discover(options);
  REQUIRE(registry.entries().size() == 1);
  const auto& entry = registry.entries()[0];
  INFO("state reason: " << entry.reason);
  REQUIRE(entry.state == EntryState::loaded);
  CHECK(entry.cross_check.empty());
  auto backend = registry.select("skeleton");
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
