// SPDX-License-Identifier: MIT OR Apache-2.0
// The launch path of a resolved handle: no heap allocation (this program replaces the global
// operator new to count them), no runtime lock that serialises launches from several threads,
// and the same refusal as before for a handle the backend did not return.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <metrale/registry.hpp>

#include "test_support.hpp"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <thread>

using namespace metrale;
using namespace metrale::testing;
namespace fs = std::filesystem;

namespace {

// Counted only while `counting` is set, from every thread (the CPU backend's workers too).
std::atomic<bool> counting{false};
std::atomic<uint64_t> allocations{0};

void* allocate(std::size_t size, std::size_t alignment) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = alignment <= alignof(std::max_align_t)
                ? std::malloc(size ? size : 1)
                : std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t size) { return allocate(size, 0); }
void* operator new[](std::size_t size) { return allocate(size, 0); }
void* operator new(std::size_t size, std::align_val_t a) { return allocate(size, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t size, std::align_val_t a) { return allocate(size, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

const fs::path kCpuManifest = fs::path(CPU_PLUGIN_DIR) / "cpu.json";

Registry discover_cpu() {
  DiscoveryOptions options;
  options.manifests = std::vector<fs::path>{kCpuManifest};
  return Registry::discover(options);
}

uint16_t bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);  // exact for the small values used here
}

float from_bf16(uint16_t h) {
  const uint32_t bits = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// act/silu_mul over `rows` rows of `cols` on the CPU backend: inputs on the device, the expected
// output on the host.
struct SiluMul {
  static constexpr uint32_t cols = 64;
  Backend& b;
  uint32_t rows;
  DevicePtr in, out;
  std::vector<float> want;

  SiluMul(Backend& backend, uint32_t m, float scale) : b(backend), rows(m) {
    std::vector<uint16_t> gate_up(size_t{2} * rows * cols);
    for (uint32_t r = 0; r < rows; ++r) {
      for (uint32_t j = 0; j < cols; ++j) {
        const float g = scale * static_cast<float>(static_cast<int>(j % 8) - 4) / 4;
        gate_up[size_t{r} * 2 * cols + j] = bf16(g);
        gate_up[size_t{r} * 2 * cols + cols + j] = bf16(2.0f);
        want.push_back(2.0f * g / (1.0f + std::exp(-g)));
      }
    }
    in = b.alloc(gate_up.size() * 2);
    out = b.alloc(size_t{rows} * cols * 2);
    b.copy_to_device(in, gate_up.data(), gate_up.size() * 2);
  }
  ~SiluMul() {
    b.free(in);
    b.free(out);
  }
  void launch(KernelHandle kernel) { b.launch(kernel, LaunchShape{{1, rows, 1}, {256, 1, 1}, 0, 0}, in, out, rows, cols); }
  // How many outputs differ from silu(g) * u.
  size_t wrong() {
    std::vector<uint16_t> got(size_t{rows} * cols);
    b.copy_to_host(got.data(), out, got.size() * 2);
    b.memset(out, 0, got.size() * 2);
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += std::fabs(from_bf16(got[i]) - want[i]) > 0.02f * (1 + std::fabs(want[i]));
    return bad;
  }
};

// Heap allocations made while `work` runs.
template <class Work>
uint64_t allocations_during(Work&& work) {
  allocations.store(0);
  counting.store(true);
  work();
  counting.store(false);
  return allocations.load();
}

Error error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no metrale::Error");
  return Error(Status::ok, "");
}

}  // namespace

TEST_CASE("launching a resolved handle allocates nothing, in the runtime or in the CPU plugin") {
  auto registry = discover_cpu();
  auto cpu = registry.select("cpu");
  const KernelHandle silu_mul = cpu->kernel("act", "silu_mul");
  SiluMul one(*cpu, 1, 1.0f), many(*cpu, 8, 1.0f);  // inline, and blocks handed to the pool
  one.launch(silu_mul);
  many.launch(silu_mul);
  CHECK(allocations_during([&] {
          for (int i = 0; i < 100; ++i) one.launch(silu_mul), many.launch(silu_mul);
        }) == 0);
  CHECK(one.wrong() == 0);
  CHECK(many.wrong() == 0);
}

TEST_CASE("the quantised decode kernels allocate nothing either: dense GEMV, grouped GEMM and GEMV over experts") {
  auto registry = discover_cpu();
  auto cpu = registry.select("cpu");
  // Zeroed buffers larger than any of these launches reads: zero weights give zero outputs
  // whatever the layout, and the checks see allocations large enough.
  constexpr size_t kBytes = size_t{64} << 10;
  std::vector<DevicePtr> p;
  for (int i = 0; i < 6; ++i) {
    p.push_back(cpu->alloc(kBytes));
    cpu->memset(p.back(), 0, kBytes);
  }
  const uint32_t n = 128, k = 128, experts = 4, one = 1;
  const std::vector<int32_t> offsets{0, 0, 1, 1, 3}, active{2, 1, 3};  // experts 1 and 3 have rows
  DevicePtr rows = cpu->alloc(offsets.size() * 4), ids = cpu->alloc(active.size() * 4);
  cpu->copy_to_device(rows, offsets.data(), offsets.size() * 4);
  cpu->copy_to_device(ids, active.data(), active.size() * 4);
  const KernelHandle gemv = cpu->kernel("w4a16", "w4a16_gemv"), grouped = cpu->kernel("moe", "w4a16_grouped_gemm"),
                     fp8 = cpu->kernel("fp8", "fp8_grouped_gemv");
  const auto launch = [&] {
    cpu->launch(gemv, LaunchShape{{n / 64, 1, 1}, {256, 1, 1}, 0, 0}, p[0], p[1], p[2], p[3], one, n, k);
    cpu->launch(grouped, LaunchShape{{n / 128, experts, 1}, {256, 1, 1}, 0, 0}, p[0], p[1], p[2], rows, p[3], n, k,
                experts);
    cpu->launch(fp8, LaunchShape{{n / 64, 2, 1}, {256, 1, 1}, 0, 0}, p[0], p[4], p[5], rows, ids, p[3], n, k, 2u);
  };
  launch();
  CHECK(allocations_during([&] {
          for (int i = 0; i < 100; ++i) launch();
        }) == 0);
  for (DevicePtr ptr : p) cpu->free(ptr);
  cpu->free(rows);
  cpu->free(ids);
}

TEST_CASE("8 threads launch one handle on the CPU backend at once: every result right") {
  auto registry = discover_cpu();
  auto cpu = registry.select("cpu");
  const KernelHandle silu_mul = cpu->kernel("act", "silu_mul");
  constexpr int kThreads = 8, kLaunches = 200;
  std::atomic<size_t> wrong{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        SiluMul work(*cpu, 1 + t % 3, 0.5f + t);  // each thread its own buffers and values
        for (int i = 0; i < kLaunches; ++i) {
          work.launch(silu_mul);
          if (i % 50 == 49) wrong += work.wrong();
        }
      } catch (const std::exception&) {
        ++errors;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(errors.load() == 0);
  CHECK(wrong.load() == 0);
}

TEST_CASE("launches from several threads are inside the plugin at once: no runtime lock serialises them") {
  // The rendezvous plugin's launch returns only once 8 launches are inside it together; a
  // runtime that held a lock across the call would let one in at a time and the launches fail.
  TempDir dir;
  const nlohmann::json fill{{"name", "fill"},
                            {"params", {{{"name", "out"}, {"type", "ptr"}}, {{"name", "n"}, {"type", "u32"}},
                                        {{"name", "value"}, {"type", "f32"}}}}};
  auto registry = discover_manifest(
      dir, manifest_json("fault", fault_plugin("launch_rendezvous"), 1, {{"test", nlohmann::json::array({fill})}}));
  auto backend = registry.select("fault");
  const KernelHandle kernel = backend->kernel("test", "fill");
  std::vector<DevicePtr> buffers;
  for (int t = 0; t < 8; ++t) buffers.push_back(backend->alloc(16 * sizeof(float)));
  std::vector<std::string> failures(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      try {
        backend->launch(kernel, LaunchShape{{1, 1, 1}, {16, 1, 1}, 0, 0}, buffers[t], uint32_t{16}, float(t));
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 8; ++t) {
    CHECK_MESSAGE(failures[t].empty(), failures[t]);
    float first = -1;
    backend->copy_to_host(&first, buffers[t], sizeof first);
    CHECK(first == float(t));
    backend->free(buffers[t]);
  }
}

TEST_CASE("a handle this backend did not return is refused as before: forged, or another backend's") {
  auto first = discover_cpu(), second = discover_cpu();
  auto a = first.select("cpu"), b = second.select("cpu");
  const KernelHandle silu_mul = a->kernel("act", "silu_mul");
  SiluMul work(*b, 1, 1.0f);
  const std::string refusal = "backend cpu: launch of a handle this backend did not return";
  for (KernelHandle forged : {KernelHandle{12345}, KernelHandle{silu_mul.value}, KernelHandle{}}) {
    const Error e = error_of([&] { work.launch(forged); });
    CHECK(e.status() == Status::invalid_argument);
    CHECK(std::string(e.what()) == refusal);
  }
  // Another backend's handle, before and after this backend resolved the same kernel: the
  // plugin's handle value is the same in both instances, the record is not.
  for (int resolved = 0; resolved < 2; ++resolved) {
    CAPTURE(resolved);
    if (resolved) REQUIRE(b->kernel("act", "silu_mul").value == silu_mul.value);
    const Error e = error_of([&] { work.launch(silu_mul); });
    CHECK(e.status() == Status::invalid_argument);
    CHECK(std::string(e.what()) == refusal);
  }
}

TEST_CASE("a launch that fails still says which kernel, argument and plugin") {
  auto registry = discover_cpu();
  auto cpu = registry.select("cpu");
  const KernelHandle silu_mul = cpu->kernel("act", "silu_mul");
  SiluMul work(*cpu, 1, 1.0f);
  const uint32_t one = 1, cols = SiluMul::cols;
  CHECK(std::string(error_of([&] { cpu->launch(silu_mul, LaunchShape{}, work.in, work.out, one); }).what()) ==
        "act/silu_mul: launched with 3 arguments, manifest declares 4 (ptr, ptr, u32, u32)");
  CHECK(std::string(error_of([&] { cpu->launch(silu_mul, LaunchShape{}, work.in, work.out, one, 1.0f); }).what()) ==
        "act/silu_mul: argument 3 (i) is f32, manifest declares u32");
  const Error e = error_of([&] { cpu->launch(silu_mul, LaunchShape{{0, 1, 1}, {256, 1, 1}, 0, 0}, work.in, work.out, one, cols); });
  CHECK(e.status() == Status::invalid_argument);
  CHECK(std::string(e.what()) ==
        "backend cpu (plugin " + cpu->manifest().library.string() +
            "): launch(act/silu_mul) failed (invalid-argument): launch act/silu_mul: grid (0, 1, 1) and block (256, 1, "
            "1) must be at least 1 in every dimension");
}
