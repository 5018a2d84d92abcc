// SPDX-License-Identifier: MIT OR Apache-2.0
// Benchmark of the CUDA GEMM and GEMV families on the GPU at model-sized shapes: time per launch,
// weight bandwidth (bytes of codes, scales and zero points read per second) and its ratio to the
// device's copy bandwidth measured in the same run (a device-to-device copy; bytes read + written
// per second). Weights rotate through enough copies to exceed the L2 cache, so each launch streams
// from DRAM. The W4A16 family here, the quantized families in gpu_bench_quant.cpp.
// Suite 'gpu'; exits 77 with one line when no CUDA device is usable. `--json FILE` also writes
// the rows as JSON.
#include "gpu_bench.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

using namespace metrale;
using metrale::gpu_test::DeviceBuffer;
using gpu_bench::ceil_div;
using gpu_bench::time_per_call;

namespace {

struct Kernel {
  const char* module;
  const char* name;
  uint32_t tile_n, tile_m, threads;
  std::vector<uint32_t> ms;  // rows to benchmark
};

const Kernel kKernels[] = {
    {"w4a16", "w4a16_gemv", 64, 1, 128, {1}},
    {"w4a16", "w4a16_gemv_b8", 64, 8, 128, {4, 8}},
    {"w4a16", "w4a16_gemm_t", 128, 64, 128, {16, 128, 512}},
    {"w4a16", "w4a16_gemm_t_p3", 128, 64, 128, {16, 128, 512}},
    {"w4a16", "w4a16_gemm_t_k64", 128, 64, 128, {16, 128, 512}},
    {"w4a16", "w4a16_gemm_t_k64_p3", 128, 64, 128, {16, 128, 512}},
    {"w4a16", "w4a16_gemm_t_k64_n64_p3", 64, 64, 128, {16, 128, 512}},
    {"w4a16_v2", "w4a16_gemm_t_m128_v2", 128, 128, 256, {512, 2048}},
    {"w4a16_v3", "w4a16_gemm_t_m128_v3", 128, 128, 256, {512, 2048}},
};

// The W4A16 family at N×K = 14336×4096 and 4096×14336.
void bench_w4a16(Backend& b, double copy_gbps, nlohmann::json& rows) {
  struct Problem {
    uint32_t n, k;
  };
  const Problem problems[] = {{14336, 4096}, {4096, 14336}};
  std::mt19937 rng(1);
  std::printf("%-26s %6s %6s %6s %10s %10s %8s %9s\n", "kernel", "m", "n", "k", "us", "weight GB/s", "vs copy", "TFLOP/s");
  for (const auto& p : problems) {
    const size_t code_bytes = static_cast<size_t>(p.n) * p.k / 2;
    const size_t scale_bytes = static_cast<size_t>(p.n) * (p.k / 128) * 2;
    // Enough weight copies to exceed any L2 (>= 256 MiB in total).
    const size_t copies = std::max<size_t>(2, (size_t{256} << 20) / code_bytes + 1);
    std::vector<std::unique_ptr<DeviceBuffer>> q, s;
    std::vector<uint32_t> host_q(code_bytes / 4);
    for (auto& word : host_q) word = rng();
    std::vector<uint16_t> host_s(scale_bytes / 2, 0x2000);  // f16 ~0.0078
    for (size_t c = 0; c < copies; ++c) {
      q.push_back(std::make_unique<DeviceBuffer>(b, host_q));
      s.push_back(std::make_unique<DeviceBuffer>(b, host_s));
    }
    const uint32_t max_m = 2048;
    std::vector<uint16_t> host_x(static_cast<size_t>(max_m) * p.k, 0x3c00);  // bf16 ~1.0
    DeviceBuffer x(b, host_x), y(b, static_cast<size_t>(max_m) * p.n * 2);
    for (const auto& kernel : kKernels) {
      const KernelHandle handle = b.try_kernel(kernel.module, kernel.name);
      if (!handle) {
        std::printf("%-26s (not available on %s)\n", kernel.name, b.target().c_str());
        continue;
      }
      for (const uint32_t m : kernel.ms) {
        LaunchShape shape;
        shape.grid = {ceil_div(p.n, kernel.tile_n), kernel.tile_m == 1 || kernel.tile_m == 8 ? 1 : ceil_div(m, kernel.tile_m), 1};
        shape.block = {kernel.threads, 1, 1};
        size_t next = 0;
        const double seconds = time_per_call(b, [&] {
          const size_t c = next++ % copies;
          b.launch(handle, shape, x.ptr(), q[c]->ptr(), s[c]->ptr(), y.ptr(), m, p.n, p.k);
        });
        const double gbps = static_cast<double>(code_bytes + scale_bytes) / seconds / 1e9;
        const double tflops = 2.0 * m * p.n * p.k / seconds / 1e12;
        std::printf("%-26s %6u %6u %6u %10.1f %10.1f %7.2fx %9.1f\n", kernel.name, m, p.n, p.k, seconds * 1e6, gbps,
                    gbps / copy_gbps, tflops);
        rows.push_back({{"kernel", kernel.name}, {"m", m}, {"n", p.n}, {"k", p.k}, {"us", seconds * 1e6},
                        {"weight_gbps", gbps}, {"ratio_to_copy", gbps / copy_gbps}, {"tflops", tflops}});
      }
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) json_path = argv[i + 1];
  }
  static Registry registry = gpu_test::discover_cuda();
  auto cuda = gpu_test::cuda_backend_or_explain(registry);
  if (!cuda) return 77;
  Backend& b = *cuda;
  std::printf("CUDA backend on %s (%s), %.1f GiB\n", b.device_name().c_str(), b.target().c_str(),
              static_cast<double>(b.memory_bytes()) / (1u << 30));

  // Copy bandwidth: 1 GiB device-to-device.
  const size_t copy_bytes = size_t{1} << 30;
  DeviceBuffer src(b, copy_bytes), dst(b, copy_bytes);
  b.memset(src.ptr(), 1, copy_bytes);
  const double copy_seconds = time_per_call(b, [&] { b.copy_device(dst.ptr(), src.ptr(), copy_bytes); });
  const double copy_gbps = 2.0 * copy_bytes / copy_seconds / 1e9;
  std::printf("device copy: %.1f GB/s (read + write)\n\n", copy_gbps);

  auto rows = nlohmann::json::array();
  bench_w4a16(b, copy_gbps, rows);
  gpu_bench::bench_quant(b, copy_gbps, rows);
  if (!json_path.empty()) {
    nlohmann::json doc{{"device", b.device_name()}, {"target", b.target()}, {"copy_gbps", copy_gbps}, {"rows", rows}};
    std::ofstream(json_path) << doc.dump(2) << '\n';
  }
  return 0;
}
