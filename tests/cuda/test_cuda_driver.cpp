// SPDX-License-Identifier: MIT OR Apache-2.0
// The CUDA plugin's driver side against the fake driver: availability, device and target
// detection, its memory choices, the context on every thread, and every injected driver failure
// reported with its name. The contract every plugin meets (statuses, memory and stream semantics,
// NULL arguments, list_kernels against the manifest) is the conformance suite's (tests/plugin_cts),
// which runs on this plugin and the fake driver too.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "cuda_test_support.hpp"

#include <cstring>
#include <thread>

using namespace metrale::cuda_test;

namespace {

// A clean fake: one sm_80 device, no failures, no recording.
Env clean_fake() {
  return Env{{"FAKECUDA_DEVICES", "1"}, {"FAKECUDA_CC", "8.0"}, {"FAKECUDA_FAIL", std::nullopt},
             {"FAKECUDA_LOG", std::nullopt}, {"FAKECUDA_MEMORY", std::nullopt}};
}

}  // namespace

TEST_CASE("no driver library: unavailable, saying which library could not be loaded") {
  auto env = clean_fake();
  CreateOptions options;
  options.driver = "/nonexistent/dir/libcuda.so.1";
  Instance instance(options);
  CHECK(instance.status == METRALE_STATUS_UNAVAILABLE);
  CHECK(instance.backend == nullptr);
  CHECK(instance.create_error.find("no CUDA driver") != std::string::npos);
  CHECK(instance.create_error.find("/nonexistent/dir/libcuda.so.1") != std::string::npos);
}

TEST_CASE("zero devices: unavailable") {
  auto env = clean_fake();
  Env none{{"FAKECUDA_DEVICES", "0"}};
  Instance instance;
  CHECK(instance.status == METRALE_STATUS_UNAVAILABLE);
  CHECK(instance.create_error.find("no device") != std::string::npos);
}

TEST_CASE("cuInit failing: unavailable with the CUDA error name") {
  auto env = clean_fake();
  Env fail{{"FAKECUDA_FAIL", "cuInit=100"}};
  Instance instance;
  CHECK(instance.status == METRALE_STATUS_UNAVAILABLE);
  CHECK(instance.create_error.find("cuInit failed: CUDA_ERROR_NO_DEVICE (100)") != std::string::npos);
}

TEST_CASE("a device index beyond the devices present is not found") {
  auto env = clean_fake();
  Env two{{"FAKECUDA_DEVICES", "2"}};
  CreateOptions options;
  options.device_index = 2;
  Instance instance(options);
  CHECK(instance.status == METRALE_STATUS_NOT_FOUND);
  CHECK(instance.create_error.find("CUDA device 2 requested; 2 present") != std::string::npos);
}

TEST_CASE("device_count opens the default driver (here the fake, by LD_LIBRARY_PATH)") {
  auto env = clean_fake();
  char error[512] = {};
  uint32_t count = 99;
  {
    Env three{{"FAKECUDA_DEVICES", "3"}};
    REQUIRE(Plugin::get().table->device_count(&count, error, sizeof(error)) == METRALE_STATUS_OK);
    CHECK(count == 3);
  }
  {
    Env none{{"FAKECUDA_DEVICES", "0"}};
    CHECK(Plugin::get().table->device_count(&count, error, sizeof(error)) == METRALE_STATUS_UNAVAILABLE);
    CHECK(count == 0);
    CHECK(std::string(error).find("no device") != std::string::npos);
  }
}

TEST_CASE("compute capability decides the target; arch-specific targets where they exist") {
  auto env = clean_fake();
  const std::pair<const char*, const char*> cases[] = {
      {"7.5", "sm_75"}, {"8.0", "sm_80"}, {"8.6", "sm_86"}, {"8.9", "sm_89"},
      {"9.0", "sm_90a"}, {"10.0", "sm_100a"}, {"12.0", "sm_120a"}};
  for (const auto& [cc, target] : cases) {
    CAPTURE(cc);
    Env device{{"FAKECUDA_CC", cc}, {"FAKECUDA_MEMORY", "1073741824"}};
    Instance instance;
    REQUIRE_MESSAGE(instance.status == METRALE_STATUS_OK, instance.create_error);
    const auto info = instance.device();
    CHECK(std::string(info.target) == target);
    CHECK(std::string(info.name) == std::string("Fake CUDA Device ") + cc);
    CHECK(info.memory_bytes == 1073741824u);
    CHECK(info.compute_units == 108);
    CHECK(instance.log.contains(METRALE_LOG_INFO, target));
  }
}

TEST_CASE("the instance drives the device it was asked for") {
  auto env = clean_fake();
  Env two{{"FAKECUDA_DEVICES", "2"}, {"FAKECUDA_CC", "8.0,9.0"}};
  CreateOptions options;
  options.device_index = 1;
  Instance instance(options);
  REQUIRE_MESSAGE(instance.status == METRALE_STATUS_OK, instance.create_error);
  CHECK(std::string(instance.device().target) == "sm_90a");
}

TEST_CASE("memory: 256-byte aligned; 0 bytes still get a distinct address; freeing 0 is a no-op") {
  auto env = clean_fake();
  Instance instance;
  REQUIRE(instance.status == METRALE_STATUS_OK);
  const auto& t = instance.t();
  uint64_t a = 0, z = 0;
  REQUIRE(t.mem_alloc(instance.backend, 4096, &a) == METRALE_STATUS_OK);
  CHECK(a % 256 == 0);
  REQUIRE(t.mem_alloc(instance.backend, 0, &z) == METRALE_STATUS_OK);
  CHECK(z != 0);
  CHECK(z != a);
  CHECK(t.mem_free(instance.backend, 0) == METRALE_STATUS_OK);
  // A range past the allocation is refused before the driver sees it, naming the range.
  std::vector<uint8_t> back(4096);
  CHECK(t.copy_to_host(instance.backend, back.data(), a + 1, 4096, 0) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(instance.last_error().find("not inside an allocation") != std::string::npos);
  CHECK(t.mem_free(instance.backend, z) == METRALE_STATUS_OK);
  CHECK(t.mem_free(instance.backend, a) == METRALE_STATUS_OK);
}

TEST_CASE("the primary context is made current on whichever thread calls in") {
  auto env = clean_fake();
  Instance instance;
  REQUIRE(instance.status == METRALE_STATUS_OK);
  metrale_status status = METRALE_STATUS_INTERNAL;
  uint64_t p = 0;
  // The fake refuses memory calls on a thread without a current context.
  std::thread worker([&] { status = instance.t().mem_alloc(instance.backend, 128, &p); });
  worker.join();
  CHECK(status == METRALE_STATUS_OK);
  CHECK(instance.t().mem_free(instance.backend, p) == METRALE_STATUS_OK);
}

TEST_CASE("last_error belongs to the thread whose call failed") {
  auto env = clean_fake();
  Instance instance;
  REQUIRE(instance.status == METRALE_STATUS_OK);
  CHECK(instance.t().mem_free(instance.backend, 0x1234) == METRALE_STATUS_NOT_FOUND);
  CHECK(instance.last_error().find("0x1234") != std::string::npos);
  std::string other;
  std::thread worker([&] { other = instance.last_error(); });
  worker.join();
  CHECK(other.empty());
}

TEST_CASE("driver failures while creating the instance: unavailable, naming the call and the error") {
  auto env = clean_fake();
  const std::pair<const char*, const char*> cases[] = {
      {"cuDeviceGetCount=3", "cuDeviceGetCount failed: CUDA_ERROR_NOT_INITIALIZED (3)"},
      {"cuDeviceGet=101", "cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE (101)"},
      {"cuDeviceGetName=999", "cuDeviceGetName failed: CUDA_ERROR_UNKNOWN (999)"},
      {"cuDeviceGetAttribute=1", "cuDeviceGetAttribute failed: CUDA_ERROR_INVALID_VALUE (1)"},
      {"cuDeviceTotalMem_v2=999", "cuDeviceTotalMem_v2 failed: CUDA_ERROR_UNKNOWN (999)"},
      {"cuDevicePrimaryCtxRetain=46", "cuDevicePrimaryCtxRetain failed: CUDA_ERROR_DEVICE_UNAVAILABLE (46)"},
      {"cuCtxSetCurrent=201", "cuCtxSetCurrent failed: CUDA_ERROR_INVALID_CONTEXT (201)"},
  };
  for (const auto& [spec, message] : cases) {
    CAPTURE(spec);
    Env fail{{"FAKECUDA_FAIL", spec}};
    Instance instance;
    CHECK(instance.backend == nullptr);
    CHECK(instance.status != METRALE_STATUS_OK);
    CHECK(instance.create_error.find(message) != std::string::npos);
  }
  SUBCASE("out of memory while creating the context stays out of memory") {
    Env fail{{"FAKECUDA_FAIL", "cuDevicePrimaryCtxRetain=2"}};
    Instance instance;
    CHECK(instance.status == METRALE_STATUS_OUT_OF_MEMORY);
  }
}

TEST_CASE("driver failures after creation: each call's status and error name, and the backend carries on") {
  auto env = clean_fake();
  Instance instance;
  REQUIRE(instance.status == METRALE_STATUS_OK);
  const auto& t = instance.t();
  uint64_t p = 0;
  REQUIRE(t.mem_alloc(instance.backend, 1024, &p) == METRALE_STATUS_OK);
  uint8_t buffer[16] = {};

  {
    Env fail{{"FAKECUDA_FAIL", "cuMemAlloc_v2=2"}};
    uint64_t q = 0;
    CHECK(t.mem_alloc(instance.backend, 1024, &q) == METRALE_STATUS_OUT_OF_MEMORY);
    CHECK(q == 0);
    CHECK(instance.last_error() == "cuMemAlloc_v2(1024 bytes) failed: CUDA_ERROR_OUT_OF_MEMORY (2)");
  }
  {
    Env fail{{"FAKECUDA_FAIL", "cuMemcpyHtoDAsync=700"}};
    CHECK(t.copy_to_device(instance.backend, p, buffer, 16, 0) == METRALE_STATUS_INTERNAL);
    CHECK(instance.last_error() == "cuMemcpyHtoDAsync_v2 failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)");
  }
  {
    Env fail{{"FAKECUDA_FAIL", "cuMemcpyDtoHAsync_v2=719"}};
    CHECK(t.copy_to_host(instance.backend, buffer, p, 16, 0) == METRALE_STATUS_INTERNAL);
    CHECK(instance.last_error() == "cuMemcpyDtoHAsync_v2 failed: CUDA_ERROR_LAUNCH_FAILED (719)");
  }
  {
    Env fail{{"FAKECUDA_FAIL", "cuMemsetD8Async=1"}};
    CHECK(t.memset_device(instance.backend, p, 0, 16, 0) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(instance.last_error() == "cuMemsetD8Async failed: CUDA_ERROR_INVALID_VALUE (1)");
  }
  {
    Env fail{{"FAKECUDA_FAIL", "cuStreamCreate=999"}};
    uint64_t s = 0;
    CHECK(t.stream_create(instance.backend, &s) == METRALE_STATUS_INTERNAL);
    CHECK(instance.last_error() == "cuStreamCreate failed: CUDA_ERROR_UNKNOWN (999)");
  }
  {
    Env fail{{"FAKECUDA_FAIL", "cuStreamSynchronize=999"}};
    CHECK(t.stream_synchronize(instance.backend, 0) == METRALE_STATUS_INTERNAL);
    CHECK(instance.last_error() == "cuStreamSynchronize failed: CUDA_ERROR_UNKNOWN (999)");
  }
  {
    Env fail{{"FAKECUDA_FAIL", "cuMemFree_v2=700"}};
    CHECK(t.mem_free(instance.backend, p) == METRALE_STATUS_INTERNAL);
    CHECK(instance.last_error() == "cuMemFree_v2 failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)");
  }
  {
    // A failure from the n-th call on: the first two allocations succeed.
    Env fail{{"FAKECUDA_FAIL", "cuMemAlloc=2@3"}};
    uint64_t q[3] = {};
    CHECK(t.mem_alloc(instance.backend, 8, &q[0]) == METRALE_STATUS_OK);
    CHECK(t.mem_alloc(instance.backend, 8, &q[1]) == METRALE_STATUS_OK);
    CHECK(t.mem_alloc(instance.backend, 8, &q[2]) == METRALE_STATUS_OUT_OF_MEMORY);
    CHECK(t.mem_free(instance.backend, q[0]) == METRALE_STATUS_OK);
    CHECK(t.mem_free(instance.backend, q[1]) == METRALE_STATUS_OK);
  }
  // With the faults gone the same backend works again.
  CHECK(t.copy_to_device(instance.backend, p, buffer, 16, 0) == METRALE_STATUS_OK);
  CHECK(t.mem_free(instance.backend, p) == METRALE_STATUS_OK);
}

// Last in the file: the stub's SONAME is libcuda.so.1, so once it is loaded a later
// dlopen("libcuda.so.1") (device_count) would bind to it instead of the fake.
TEST_CASE("the toolkit's stub driver: unavailable, named as the stub") {
  const std::string stub = METRALE_TEST_STUB_DRIVER;
  if (stub.empty()) {
    MESSAGE("no stub libcuda.so in this toolkit; case not applicable");
    return;
  }
  CreateOptions options;
  options.driver = stub;
  Instance instance(options);
  CHECK(instance.status == METRALE_STATUS_UNAVAILABLE);
  CHECK(instance.create_error.find("stub") != std::string::npos);
  CHECK(instance.create_error.find("CUDA_ERROR_STUB_LIBRARY") != std::string::npos);
}
