// SPDX-License-Identifier: MIT OR Apache-2.0
// launch()'s checks that come before anything specific to the kernel (unknown handle, config,
// argument count and array, grid and block, stream), and every instance entry point's answer to a
// NULL instance. Kernel numerics are each plugin's own tests.
#include "cts.hpp"

#include <algorithm>

namespace {

// A kernel the instance resolves: the first listed one not gated away here.
struct Target {
  uint64_t handle = 0;
  std::string key;
  uint32_t params = 0;
  const std::vector<metrale::KernelParam>* types = nullptr;
};

std::optional<Target> launchable(cts::Instance& d) {
  for (const auto& module : cts::manifest().modules)
    for (const auto& kernel : module.kernels) {
      uint64_t handle = 0;
      if (d.t().get_kernel(d.raw(), module.name.c_str(), kernel.name.c_str(), &handle) == METRALE_STATUS_OK)
        return Target{handle, module.name + "/" + kernel.name, static_cast<uint32_t>(kernel.params.size()),
                      &kernel.params};
    }
  return std::nullopt;
}

metrale_launch_config one_block() { return metrale_launch_config{{1, 1, 1}, {32, 1, 1}, 0, 0}; }

}  // namespace

TEST_CASE("launch: the kernel-independent checks come first and answer as the contract says") {
  cts::Instance* d = cts::device("launch checks");
  if (d == nullptr) return;
  const std::optional<Target> k = launchable(*d);
  if (!k) {
    cts::skip("launch checks", "no listed kernel resolves on this device");
    return;
  }
  CAPTURE(k->key);
  const auto& t = d->t();
  // Pointer parameters would get this (zeroed) allocation; the checks must not get that far.
  uint64_t buffer = 0;
  REQUIRE(t.mem_alloc(d->raw(), 1 << 16, &buffer) == METRALE_STATUS_OK);
  REQUIRE(t.memset_device(d->raw(), buffer, 0, 1 << 16, 0) == METRALE_STATUS_OK);
  const cts::Args args(*k->types, buffer), more(*k->types, buffer, 1);
  const metrale_launch_config config = one_block();

  SUBCASE("a handle get_kernel never returned is not found") {
    for (uint64_t bogus : {uint64_t{0}, uint64_t{k->handle ^ 0x5a5a000000000000u}, ~uint64_t{0}})
      CTS_CHECK_FAILS(*d, t.launch(d->raw(), bogus, &config, args.data(), k->params), METRALE_STATUS_NOT_FOUND);
  }
  SUBCASE("no config, or another argument count") {
    CTS_CHECK_FAILS(*d, t.launch(d->raw(), k->handle, nullptr, args.data(), k->params), METRALE_STATUS_INVALID_ARGUMENT);
    CTS_CHECK_FAILS(*d, t.launch(d->raw(), k->handle, &config, more.data(), k->params + 1),
                    METRALE_STATUS_INVALID_ARGUMENT);
    if (k->params > 0)
      CTS_CHECK_FAILS(*d, t.launch(d->raw(), k->handle, &config, args.data(), k->params - 1),
                      METRALE_STATUS_INVALID_ARGUMENT);
  }
  SUBCASE("no argument array, or a NULL entry in it") {
    if (k->params == 0) cts::skip("launch with NULL arguments", k->key + " takes no arguments");
    if (k->params > 0) {
      CTS_CHECK_FAILS(*d, t.launch(d->raw(), k->handle, &config, nullptr, k->params), METRALE_STATUS_INVALID_ARGUMENT);
      cts::Args holed(*k->types, buffer);
      holed.set_null(k->params - 1);
      CTS_CHECK_FAILS(*d, t.launch(d->raw(), k->handle, &config, holed.data(), k->params),
                      METRALE_STATUS_INVALID_ARGUMENT);
    }
  }
  SUBCASE("a zero grid or block dimension") {
    for (int dim = 0; dim < 6; ++dim) {
      metrale_launch_config bad = one_block();
      (dim < 3 ? bad.grid : bad.block)[dim % 3] = 0;
      CAPTURE(dim);
      CTS_CHECK_FAILS(*d, t.launch(d->raw(), k->handle, &bad, args.data(), k->params), METRALE_STATUS_INVALID_ARGUMENT);
    }
  }
  SUBCASE("a stream the instance does not have") {
    metrale_launch_config elsewhere = one_block();
    elsewhere.stream = 424242;
    CTS_CHECK_FAILS(*d, t.launch(d->raw(), k->handle, &elsewhere, args.data(), k->params), METRALE_STATUS_NOT_FOUND);
  }
  CHECK(t.mem_free(d->raw(), buffer) == METRALE_STATUS_OK);
}

TEST_CASE("every instance entry point answers a NULL instance with INVALID_ARGUMENT") {
  const auto& t = cts::table();
  metrale_device_info info{};
  info.struct_size = sizeof info;
  const metrale_kernel_desc* kernels = nullptr;
  size_t count = 0;
  uint64_t out = 0;
  uint8_t byte = 0;
  const metrale_launch_config config = one_block();
  const std::pair<const char*, metrale_status> answers[] = {
      {"device_info", t.device_info(nullptr, &info)},
      {"list_kernels", t.list_kernels(nullptr, &kernels, &count)},
      {"get_kernel", t.get_kernel(nullptr, "m", "k", &out)},
      {"mem_alloc", t.mem_alloc(nullptr, 8, &out)},
      {"mem_free", t.mem_free(nullptr, 8)},
      {"copy_to_device", t.copy_to_device(nullptr, 8, &byte, 1, 0)},
      {"copy_to_host", t.copy_to_host(nullptr, &byte, 8, 1, 0)},
      {"copy_device", t.copy_device(nullptr, 8, 16, 1, 0)},
      {"memset_device", t.memset_device(nullptr, 8, 0, 1, 0)},
      {"stream_create", t.stream_create(nullptr, &out)},
      {"stream_destroy", t.stream_destroy(nullptr, 1)},
      {"stream_synchronize", t.stream_synchronize(nullptr, 0)},
      {"launch", t.launch(nullptr, 1, &config, nullptr, 0)},
  };
  for (const auto& [name, status] : answers)
    CHECK_MESSAGE(status == METRALE_STATUS_INVALID_ARGUMENT, std::string(name) << "(NULL, ...) answered " << cts::status_name(status));
}
