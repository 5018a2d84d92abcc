// SPDX-License-Identifier: MIT OR Apache-2.0
// metrale-bench-layers: the machine's read bandwidth and dot-product peaks, measured in this run
// per thread count, and for each preset the FFN's rate at each m of --m (decode GEMV, batched
// GEMV, tile GEMM) in GB/s of weights and GFLOP/s, as fractions of the bandwidth (weight rate)
// and of the bf16 dot peak (FLOP rate) measured on the backend's thread count; then the launch
// overhead of a one-block kernel through the runtime against the plugin's raw entry point, and
// the cost of a warm try_kernel hit. Issue 6's figures, all as ratios of the same run. Not a
// test: numbers, not verdicts. Progress on stderr; --json puts one JSON document on stdout.
#include "model/ffn.hpp"
#include "model/reference.hpp"
#include "selectors.hpp"

#include <metrale/log.hpp>
#include <metrale/registry.hpp>
#include <metrale/status.hpp>
#include <metrale/text_table.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

namespace {

using namespace metrale;
using namespace metrale::layers;
using Clock = std::chrono::steady_clock;

struct BandwidthPoint {
  unsigned threads;
  double gb_per_s;
};

// Sums a buffer of u64 with 4 independent accumulators per thread (the loop the compiler
// vectorises), best of `reps`; the result is kept so the reads cannot be optimised away.
std::vector<BandwidthPoint> measure_read_bandwidth(size_t bytes, unsigned reps, uint64_t& sink) {
  const size_t words = bytes / 8;
  std::unique_ptr<uint64_t[]> buffer(new uint64_t[words]);
  // Touch every page first (first-touch from several threads, like the readers).
  for (size_t i = 0; i < words; ++i) buffer[i] = i * 0x9e3779b97f4a7c15ull;
  std::vector<unsigned> counts;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned t = 1; t < hw; t *= 2) counts.push_back(t);
  counts.push_back(hw);
  std::vector<BandwidthPoint> out;
  for (unsigned threads : counts) {
    double best = 0;
    for (unsigned r = 0; r < reps; ++r) {
      std::vector<uint64_t> sums(threads, 0);
      const auto start = Clock::now();
      std::vector<std::thread> pool;
      for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          const size_t begin = words * t / threads, end = words * (t + 1) / threads;
          uint64_t a = 0, b = 0, c = 0, d = 0;
          size_t i = begin;
          for (; i + 4 <= end; i += 4) {
            a += buffer[i];
            b += buffer[i + 1];
            c += buffer[i + 2];
            d += buffer[i + 3];
          }
          for (; i < end; ++i) a += buffer[i];
          sums[t] = a + b + c + d;
        });
      }
      for (auto& th : pool) th.join();
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      for (uint64_t v : sums) sink += v;
      best = std::max(best, static_cast<double>(words * 8) / s / 1e9);
    }
    out.push_back({threads, best});
  }
  return out;
}

// Register-only loops: 12 independent accumulators, no memory traffic; FLOP per instruction:
// vdpbf16ps zmm 64 (32 bf16 pairs, multiply and add), vfmadd zmm 32, vfmadd ymm 16.
constexpr uint64_t kPeakIters = uint64_t{1} << 22;

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bf16"))) double bf16_dot_loop(uint64_t iters) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));  // 1.0
  __m512bh y = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x0001));  // tiny: no overflow
  for (uint64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, y);
    __asm__ volatile("" : "+v"(x), "+v"(y));
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, sum);
  return static_cast<double>(out[0]) * 0 + 64.0 * 12 * static_cast<double>(iters);
}
__attribute__((target("avx512f"))) double fma512_loop(uint64_t iters) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-30f);
  for (uint64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_fmadd_ps(x, y, a);
    __asm__ volatile("" : "+v"(x), "+v"(y));
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, sum);
  return static_cast<double>(out[0]) * 0 + 32.0 * 12 * static_cast<double>(iters);
}
__attribute__((target("avx2,fma"))) double fma256_loop(uint64_t iters) {
  __m256 acc[12];
  for (auto& a : acc) a = _mm256_setzero_ps();
  __m256 x = _mm256_set1_ps(1.0f), y = _mm256_set1_ps(1e-30f);
  for (uint64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm256_fmadd_ps(x, y, a);
    __asm__ volatile("" : "+x"(x), "+x"(y));
  }
  __m256 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, sum);
  return static_cast<double>(out[0]) * 0 + 16.0 * 12 * static_cast<double>(iters);
}
#endif

struct PeakPoint {
  unsigned threads;
  double bf16_dot_gflop_per_s;  // 0: the CPU lacks AVX512_BF16
  double fma_gflop_per_s;       // f32 FMA at the widest width the CPU has; 0: none
};

// Best of 3 per thread count, all threads running the loop at once.
std::vector<PeakPoint> measure_peaks(const std::vector<unsigned>& counts) {
  std::vector<PeakPoint> out;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool bf16 = __builtin_cpu_supports("avx512bf16");
  const bool f512 = __builtin_cpu_supports("avx512f");
  const bool f256 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  auto run = [](unsigned threads, double (*loop)(uint64_t)) {
    double best = 0;
    for (int r = 0; r < 3; ++r) {
      std::vector<double> flops(threads, 0);
      const auto start = Clock::now();
      std::vector<std::thread> pool;
      for (unsigned t = 0; t < threads; ++t) pool.emplace_back([&, t] { flops[t] = loop(kPeakIters); });
      for (auto& th : pool) th.join();
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      double total = 0;
      for (double f : flops) total += f;
      best = std::max(best, total / s / 1e9);
    }
    return best;
  };
  for (unsigned threads : counts)
    out.push_back({threads, bf16 ? run(threads, &bf16_dot_loop) : 0.0,
                   f512 ? run(threads, &fma512_loop) : f256 ? run(threads, &fma256_loop) : 0.0});
#else
  for (unsigned threads : counts) out.push_back({threads, 0.0, 0.0});
#endif
  return out;
}

template <class P, class F>
double at_threads(const std::vector<P>& points, unsigned threads, F field) {
  double v = 0;
  for (const auto& p : points)
    if (p.threads <= threads) v = field(p);  // the largest count not above `threads`
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Rate {
  std::string preset;
  std::string path;  // decode / batched / prefill
  uint32_t m = 0;
  std::string kernels;
  double median_s = 0;
  double weight_bytes = 0;
  double gb_per_s = 0;
  double gflop_per_s = 0;
  double of_bandwidth = 0;  // weight rate / read bandwidth on the backend's thread count
  double of_bf16_peak = 0;  // FLOP rate / bf16 dot peak on the backend's thread count
};

std::string path_of(uint32_t m) { return m == 1 ? "decode" : m <= 8 ? "batched" : "prefill"; }

double pass_flops(const ModelConfig& c, uint32_t m) {
  const double M = m, H = c.hidden_size;
  if (c.ffn_kind() == FfnKind::dense) return 2 * M * 3 * H * c.intermediate_size;
  if (c.ffn_kind() == FfnKind::moe) {
    double f = 2 * M * c.num_experts * H + 2 * M * c.num_experts_per_tok * 3 * H * c.moe_intermediate_size;
    if (c.shared_expert_intermediate_size) f += 2 * M * 3 * H * c.shared_expert_intermediate_size;
    return f;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"metrale-bench-layers: FFN GEMV/GEMM rates against this machine's measured read bandwidth"};
  std::string backend_name;
  std::vector<std::string> preset_list{"qwen3-32b", "qwen3-30b-a3b"};
  std::vector<uint32_t> m_list{1, 2, 4, 8, 16, 64, 256, 512};
  uint32_t repeat = 3;
  uint32_t launches = 2000;
  size_t bandwidth_mb = 1024;
  bool json = false;
  app.add_option("--backend", backend_name, "Backend (default: METRALE_BACKEND or the highest priority)");
  app.add_option("--presets", preset_list, "Presets to measure")->delimiter(',')->capture_default_str();
  app.add_option("--m", m_list, "Rows (tokens) per pass to measure, comma-separated")->delimiter(',')->capture_default_str();
  app.add_option("--launches", launches, "Launches per launch-overhead sample")->capture_default_str();
  app.add_option("--repeat", repeat, "Timed passes per rate (median)")->capture_default_str();
  app.add_option("--bandwidth-mb", bandwidth_mb, "Buffer size of the bandwidth measurement")->capture_default_str();
  app.add_flag("--json", json, "JSON on stdout");
  CLI11_PARSE(app, argc, argv);

  try {
    configure_logging();
    Registry registry = Registry::discover();
    auto backend = registry.select(backend_name.empty() ? std::nullopt : std::optional(backend_name));
    Backend& b = *backend;

    std::fprintf(stderr, "measuring read bandwidth over %zu MB...\n", bandwidth_mb);
    uint64_t sink = 0;
    auto bandwidth = measure_read_bandwidth(bandwidth_mb << 20, 5, sink);
    double peak = 0;
    for (const auto& p : bandwidth) peak = std::max(peak, p.gb_per_s);
    std::vector<unsigned> counts;
    for (const auto& p : bandwidth) counts.push_back(p.threads);
    std::fprintf(stderr, "measuring bf16 dot and f32 FMA peaks...\n");
    const auto peaks = measure_peaks(counts);
    const unsigned threads = std::max(1u, b.compute_units());
    const double bw_here = at_threads(bandwidth, threads, [](const BandwidthPoint& p) { return p.gb_per_s; });
    const double dot_here = at_threads(peaks, threads, [](const PeakPoint& p) { return p.bf16_dot_gflop_per_s; });

    std::vector<Rate> rates;
    for (const auto& name : preset_list) {
      ModelConfig c = resolve_model(name);
      std::fprintf(stderr, "%s: generating and uploading synthetic weights...\n", name.c_str());
      FfnComponent ffn;
      {
        FfnWeights w = synthetic_ffn_weights(c, 1);
        ffn = FfnComponent::build(b, c, w);
      }  // host weights freed: the bench needs only the device copy
      for (uint32_t m : m_list) {
        const std::string path = path_of(m);
        std::fprintf(stderr, "%s: %s, m = %u...\n", name.c_str(), path.c_str(), m);
        auto x = synthetic_activations(m, c.hidden_size, 2);
        DeviceBuffer dx(b, x.size() * 2);
        dx.upload(std::span<const uint16_t>(x));
        ffn.forward(dx.ptr(), m);  // warm-up
        b.synchronize();
        std::vector<double> times;
        for (uint32_t i = 0; i < repeat; ++i) {
          const auto start = Clock::now();
          ffn.forward(dx.ptr(), m);
          b.synchronize();
          times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
        }
        std::sort(times.begin(), times.end());
        Rate r;
        r.preset = name;
        r.path = path;
        r.m = m;
        std::vector<std::string> seen;
        for (const auto& step : ffn.plan(m)) {
          if (step.step.find("gate_up") == std::string::npos && step.step.find("down") == std::string::npos) continue;
          if (std::find(seen.begin(), seen.end(), step.kernel) == seen.end()) seen.push_back(step.kernel);
        }
        for (const auto& k : seen) r.kernels += (r.kernels.empty() ? "" : ", ") + k;
        r.median_s = times[times.size() / 2];
        r.weight_bytes = static_cast<double>(ffn.last_weight_bytes());
        r.gb_per_s = r.weight_bytes / r.median_s / 1e9;
        r.gflop_per_s = pass_flops(c, m) / r.median_s / 1e9;
        r.of_bandwidth = r.gb_per_s / bw_here;
        r.of_bf16_peak = dot_here > 0 ? r.gflop_per_s / dot_here : 0;
        rates.push_back(r);
      }
    }


    // Launch overhead: a one-block silu_mul (m = 1, 64 columns) through the runtime's typed
    // launch against the same launch through the plugin's raw table; medians of per-sample means.
    std::fprintf(stderr, "measuring launch overhead...\n");
    double runtime_launch_ns = 0, raw_launch_ns = 0, try_kernel_ns = 0;
    {
      const uint32_t cols = 64, one = 1;
      DeviceBuffer gu(b, size_t{2} * cols * 2), out(b, size_t{cols} * 2);
      b.memset(gu.ptr(), 0, size_t{2} * cols * 2);
      const KernelHandle act = b.kernel("act", "silu_mul");
      LaunchShape shape;
      shape.block = {256, 1, 1};
      uint64_t raw = 0;
      if (b.table().get_kernel(b.instance(), "act", "silu_mul", &raw) != METRALE_STATUS_OK)
        throw std::runtime_error("raw get_kernel(act, silu_mul) failed");
      metrale_launch_config config{{1, 1, 1}, {256, 1, 1}, 0, 0};
      const uint64_t pg = gu.ptr().address, po = out.ptr().address;
      void* const raw_args[] = {const_cast<uint64_t*>(&pg), const_cast<uint64_t*>(&po),
                                const_cast<uint32_t*>(&one), const_cast<uint32_t*>(&cols)};
      std::vector<double> via_runtime, via_raw, lookups;
      for (int sample = 0; sample < 7; ++sample) {
        auto start = Clock::now();
        for (uint32_t i = 0; i < launches; ++i) b.launch(act, shape, gu.ptr(), out.ptr(), one, cols);
        via_runtime.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() / launches);
        start = Clock::now();
        for (uint32_t i = 0; i < launches; ++i)
          if (b.table().launch(b.instance(), raw, &config, raw_args, 4) != METRALE_STATUS_OK)
            throw std::runtime_error("raw launch failed");
        via_raw.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() / launches);
        start = Clock::now();
        for (uint32_t i = 0; i < launches; ++i)
          if (!b.try_kernel("act", "silu_mul")) throw std::runtime_error("try_kernel missed");
        lookups.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() / launches);
      }
      runtime_launch_ns = median(via_runtime);
      raw_launch_ns = median(via_raw);
      try_kernel_ns = median(lookups);
    }
    if (json) {
      nlohmann::json out{{"backend", b.name()}, {"target", b.target()}, {"device", b.device_name()},
                         {"w4a16_k64_min_k", w4a16_k64_min_k()}, {"read_bandwidth_gb_per_s", peak}};
      for (const auto& p : bandwidth) out["read_bandwidth"].push_back({{"threads", p.threads}, {"gb_per_s", p.gb_per_s}});
      for (const auto& p : peaks)
        out["peaks"].push_back({{"threads", p.threads}, {"bf16_dot_gflop_per_s", p.bf16_dot_gflop_per_s},
                                {"f32_fma_gflop_per_s", p.fma_gflop_per_s}});
      out["threads"] = threads;
      out["read_bandwidth_at_threads_gb_per_s"] = bw_here;
      out["bf16_dot_peak_at_threads_gflop_per_s"] = dot_here;
      out["launch"] = {{"runtime_ns", runtime_launch_ns}, {"raw_table_ns", raw_launch_ns},
                       {"overhead_ns", runtime_launch_ns - raw_launch_ns}, {"try_kernel_hit_ns", try_kernel_ns}};
      for (const auto& r : rates) {
        out["rates"].push_back({{"preset", r.preset},       {"path", r.path},
                                {"m", r.m},                 {"kernels", r.kernels},
                                {"median_s", r.median_s},   {"weight_bytes", r.weight_bytes},
                                {"weight_gb_per_s", r.gb_per_s}, {"gflop_per_s", r.gflop_per_s},
                                {"fraction_of_read_bandwidth", r.of_bandwidth},
                                {"fraction_of_bf16_dot_peak", r.of_bf16_peak}});
      }
      out["sink"] = sink % 2;  // keeps the bandwidth loop observable
      std::cout << out.dump(2) << '\n';
      return 0;
    }
    auto f = [](double v, int digits) {
      char text[64];
      std::snprintf(text, sizeof text, "%.*f", digits, v);
      return std::string(text);
    };
    std::cout << "backend " << b.name() << " (" << b.target() << ", " << b.device_name() << ")\n\nread bandwidth (sum of u64, best of 5, "
              << bandwidth_mb << " MB):\n";
    std::vector<std::vector<std::string>> bw;
    for (const auto& p : bandwidth) bw.push_back({std::to_string(p.threads), f(p.gb_per_s, 2)});
    std::cout << render_table({"threads", "GB/s"}, bw) << "peak " << f(peak, 2) << " GB/s (checksum parity " << sink % 2 << ")\n\n";
    std::vector<std::vector<std::string>> pk;
    for (const auto& p : peaks) pk.push_back({std::to_string(p.threads), f(p.bf16_dot_gflop_per_s, 1), f(p.fma_gflop_per_s, 1)});
    std::cout << "register-only peaks (best of 3):\n" << render_table({"threads", "bf16 dot GFLOP/s", "f32 FMA GFLOP/s"}, pk)
              << "backend threads " << threads << ": read bandwidth " << f(bw_here, 2) << " GB/s, bf16 dot peak "
              << f(dot_here, 1) << " GFLOP/s (the denominators below)\n\n";
    std::vector<std::vector<std::string>> table;
    for (const auto& r : rates) {
      table.push_back({r.preset, r.path, std::to_string(r.m), f(r.median_s * 1e3, 2), f(r.weight_bytes / 1e6, 1),
                       f(r.gb_per_s, 2), f(r.gflop_per_s, 2), f(r.of_bandwidth, 3), f(r.of_bf16_peak, 3), r.kernels});
    }
    std::cout << render_table({"preset", "path", "m", "median ms", "weights MB", "GB/s", "GFLOP/s", "of read bw", "of bf16 peak", "kernels"}, table);
    std::cout << "\nlaunch, one block (act/silu_mul, m=1, 64 columns): runtime " << f(runtime_launch_ns / 1e3, 3)
              << " us, raw plugin table " << f(raw_launch_ns / 1e3, 3) << " us, overhead "
              << f((runtime_launch_ns - raw_launch_ns) / 1e3, 3) << " us; warm try_kernel hit " << f(try_kernel_ns, 0) << " ns\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "metrale-bench-layers: %s\n", e.what());
    return 1;
  }
}
