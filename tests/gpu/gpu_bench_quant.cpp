// SPDX-License-Identifier: MIT OR Apache-2.0
// The quantized families' and the plain bf16 / f16 weights' rows of the GPU benchmark (see
// gpu_bench.cpp): per kernel and shape,
// time per launch, weight GB/s (codes, scales and zero points read per second), the ratio to the
// device's copy bandwidth, and TFLOP/s. Weights rotate through copies larger than the L2 cache.
#include "gpu_bench.hpp"

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace metrale;
using metrale::gpu_test::DeviceBuffer;

namespace gpu_bench {
namespace {

enum class Act { bf16, int8, e4m3 };

struct Family {
  const char* module;
  const char* prefix;
  const char* suffix;
  unsigned bits;  // 16: plain bf16 / f16 values, no scales
  bool zeros;
  Act act;
};

const Family kFamilies[] = {
    {"w4a16_zp", "w4a16_zp", "", 4, true, Act::bf16}, {"w8a16", "w8a16", "", 8, true, Act::bf16},
    {"fp8", "fp8", "", 8, false, Act::bf16},          {"w4a8", "w4a8", "", 4, true, Act::int8},
    {"w8a8", "w8a8", "", 8, true, Act::int8},         {"fp8", "fp8", "_a8", 8, false, Act::e4m3},
    {"bf16", "bf16", "", 16, false, Act::bf16},       {"f16", "f16", "", 16, false, Act::bf16},
};

constexpr uint32_t kGroup = 128;

// Enough copies of a stack of weights to exceed any L2 (>= 256 MiB in total).
struct Weights {
  size_t code_bytes = 0, scale_bytes = 0, zero_bytes = 0;
  std::vector<std::unique_ptr<DeviceBuffer>> q, s, z;
  Weights(Backend& b, const Family& f, uint32_t n, uint32_t k, uint32_t experts, std::mt19937& rng) {
    const size_t cells = static_cast<size_t>(experts) * n * (k / kGroup);
    code_bytes = static_cast<size_t>(experts) * n * k * f.bits / 8;
    scale_bytes = f.bits == 16 ? 0 : cells * 4;
    zero_bytes = f.zeros ? cells : 0;
    std::vector<uint8_t> codes(code_bytes);
    for (size_t i = 0; i < codes.size(); ++i) {
      uint8_t& c = codes[i];
      c = static_cast<uint8_t>(rng());
      if ((c & 0x7fu) == 0x7fu) c ^= 1u;  // no E4M3 NaN
      if (f.bits == 16 && i % 2 == 1) c &= 0x3fu;  // bf16 / f16 high bytes: finite values below 4
    }
    const std::vector<float> scales(cells, 0.01f);
    const std::vector<uint8_t> zeros(zero_bytes, f.bits == 4 ? 8 : 128);
    const size_t copies = std::max<size_t>(2, (size_t{256} << 20) / code_bytes + 1);
    for (size_t c = 0; c < copies; ++c) {
      q.push_back(std::make_unique<DeviceBuffer>(b, codes));
      s.push_back(std::make_unique<DeviceBuffer>(b, scales));
      z.push_back(std::make_unique<DeviceBuffer>(b, zeros));
    }
  }
  size_t bytes() const { return code_bytes + scale_bytes + zero_bytes; }
};

// Activations for up to `rows` rows of k, in every family's format, and the outputs.
struct Activations {
  DeviceBuffer x, xq, xscale, y;
  Activations(Backend& b, uint32_t rows, uint32_t k, uint32_t n)
      : x(b, std::vector<uint16_t>(static_cast<size_t>(rows) * k, 0x3f80)),  // bf16 1.0
        xq(b, std::vector<uint8_t>(static_cast<size_t>(rows) * k, 0x38)),    // int8 56, E4M3 1.0
        xscale(b, std::vector<float>(rows, 0.01f)),
        y(b, static_cast<size_t>(rows) * n * 2) {}
};

// One launch of family f's kernel: dense (m rows) when offsets is null, else grouped.
void launch(Backend& b, const Family& f, KernelHandle h, const LaunchShape& shape, const Activations& a,
            const Weights& w, size_t c, const DeviceBuffer* offsets, uint32_t m, uint32_t n, uint32_t k,
            uint32_t experts) {
  const DevicePtr q = w.q[c]->ptr(), s = w.s[c]->ptr(), z = w.z[c]->ptr(), y = a.y.ptr();
  const DevicePtr in = f.act == Act::bf16 ? a.x.ptr() : a.xq.ptr();
  if (f.bits == 16) {
    if (offsets) b.launch(h, shape, in, q, offsets->ptr(), y, n, k, experts);
    else b.launch(h, shape, in, q, y, m, n, k);
    return;
  }
  if (f.act == Act::bf16) {
    if (offsets && f.zeros) b.launch(h, shape, in, q, s, z, offsets->ptr(), y, n, k, kGroup, experts);
    if (offsets && !f.zeros) b.launch(h, shape, in, q, s, offsets->ptr(), y, n, k, experts);
    if (!offsets && f.zeros) b.launch(h, shape, in, q, s, z, y, m, n, k, kGroup);
    if (!offsets && !f.zeros) b.launch(h, shape, in, q, s, y, m, n, k);
    return;
  }
  const DevicePtr xs = a.xscale.ptr();
  if (offsets && f.zeros) b.launch(h, shape, in, xs, q, s, z, offsets->ptr(), y, n, k, kGroup, experts);
  if (offsets && !f.zeros) b.launch(h, shape, in, xs, q, s, offsets->ptr(), y, n, k, experts);
  if (!offsets && f.zeros) b.launch(h, shape, in, xs, q, s, z, y, m, n, k, kGroup);
  if (!offsets && !f.zeros) b.launch(h, shape, in, xs, q, s, y, m, n, k);
}

void report(nlohmann::json& rows, const std::string& name, uint32_t m, uint32_t n, uint32_t k, uint32_t experts,
            double seconds, size_t weight_bytes, double copy_gbps) {
  const double gbps = static_cast<double>(weight_bytes) / seconds / 1e9;
  const double tflops = 2.0 * m * n * k / seconds / 1e12;
  std::printf("%-26s %6u %6u %6u %4u %10.1f %10.1f %7.2fx %9.1f\n", name.c_str(), m, n, k, experts, seconds * 1e6, gbps,
              gbps / copy_gbps, tflops);
  rows.push_back({{"kernel", name}, {"m", m}, {"n", n}, {"k", k}, {"experts", experts}, {"group", kGroup},
                  {"us", seconds * 1e6}, {"weight_gbps", gbps}, {"ratio_to_copy", gbps / copy_gbps}, {"tflops", tflops}});
}

void bench_dense(Backend& b, const Family& f, double copy_gbps, nlohmann::json& rows, std::mt19937& rng) {
  const uint32_t problems[][2] = {{14336, 4096}, {4096, 14336}};
  for (const auto& p : problems) {
    const uint32_t n = p[0], k = p[1];
    const Weights w(b, f, n, k, 1, rng);
    const Activations a(b, 512, k, n);
    for (const bool gemv : {true, false}) {
      if (gemv && f.act == Act::e4m3) continue;
      const std::string name = std::string(f.prefix) + (gemv ? "_gemv" : "_gemm") + f.suffix;
      const KernelHandle h = b.try_kernel(f.module, name);
      if (!h) {
        std::printf("%-26s (not available on %s)\n", name.c_str(), b.target().c_str());
        continue;
      }
      for (const uint32_t m : gemv ? std::vector<uint32_t>{1, 8} : std::vector<uint32_t>{16, 128, 512}) {
        LaunchShape shape;
        shape.grid = {gemv ? ceil_div(n, 64) : ceil_div(n, 128), gemv ? 1 : ceil_div(m, 64), 1};
        shape.block = {128, 1, 1};
        size_t next = 0;
        const double seconds =
            time_per_call(b, [&] { launch(b, f, h, shape, a, w, next++ % w.q.size(), nullptr, m, n, k, 1); });
        report(rows, name, m, n, k, 1, seconds, w.bytes(), copy_gbps);
      }
    }
  }
}

// 64 experts of a MoE gate_up projection (N 1536, K 2048), every expert with `per` rows.
void bench_grouped(Backend& b, const Family& f, double copy_gbps, nlohmann::json& rows, std::mt19937& rng) {
  const uint32_t experts = 64, n = 1536, k = 2048;
  const std::string name = std::string(f.prefix) + "_grouped_gemm" + f.suffix;
  const KernelHandle h = b.try_kernel(f.module, name);
  if (!h) {
    std::printf("%-26s (not available on %s)\n", name.c_str(), b.target().c_str());
    return;
  }
  const Weights w(b, f, n, k, experts, rng);
  const Activations a(b, experts * 128, k, n);
  for (const uint32_t per : {1u, 16u, 128u}) {
    std::vector<int32_t> offsets(experts + 1);
    for (uint32_t e = 0; e <= experts; ++e) offsets[e] = static_cast<int32_t>(e * per);
    const DeviceBuffer doff(b, offsets);
    LaunchShape shape;
    shape.grid = {ceil_div(n, 128), experts, 1};
    shape.block = {128, 1, 1};
    size_t next = 0;
    const double seconds =
        time_per_call(b, [&] { launch(b, f, h, shape, a, w, next++ % w.q.size(), &doff, 0, n, k, experts); });
    report(rows, name, experts * per, n, k, experts, seconds, w.bytes(), copy_gbps);
  }
}

// fp8_grouped_gemv over 64 active experts with one row each (moe_align's offsets and active).
void bench_grouped_gemv(Backend& b, double copy_gbps, nlohmann::json& rows, std::mt19937& rng) {
  const uint32_t experts = 64, n = 1536, k = 2048;
  const KernelHandle h = b.try_kernel("fp8", "fp8_grouped_gemv");
  if (!h) return;
  const Weights w(b, kFamilies[2], n, k, experts, rng);
  const Activations a(b, experts, k, n);
  std::vector<int32_t> offsets(experts + 1), active(experts + 1);
  active[0] = static_cast<int32_t>(experts);
  for (uint32_t e = 0; e <= experts; ++e) offsets[e] = static_cast<int32_t>(e);
  for (uint32_t e = 0; e < experts; ++e) active[1 + e] = static_cast<int32_t>(e);
  const DeviceBuffer doff(b, offsets), dactive(b, active);
  LaunchShape shape;
  shape.grid = {ceil_div(n, 64), experts, 1};
  shape.block = {128, 1, 1};
  size_t next = 0;
  const double seconds = time_per_call(b, [&] {
    const size_t c = next++ % w.q.size();
    b.launch(h, shape, a.x.ptr(), w.q[c]->ptr(), w.s[c]->ptr(), doff.ptr(), dactive.ptr(), a.y.ptr(), n, k, experts);
  });
  report(rows, "fp8_grouped_gemv", experts, n, k, experts, seconds, w.bytes(), copy_gbps);
}

}  // namespace

void bench_quant(Backend& b, double copy_gbps, nlohmann::json& rows) {
  std::mt19937 rng(2);
  std::printf("%-26s %6s %6s %6s %4s %10s %10s %8s %9s\n", "kernel (group 128)", "m", "n", "k", "E", "us",
              "weight GB/s", "vs copy", "TFLOP/s");
  for (const auto& f : kFamilies) bench_dense(b, f, copy_gbps, rows, rng);
  std::printf("\n");
  for (const auto& f : kFamilies) bench_grouped(b, f, copy_gbps, rows, rng);
  bench_grouped_gemv(b, copy_gbps, rows, rng);
  std::printf("\n");
}

}  // namespace gpu_bench
