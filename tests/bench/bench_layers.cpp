// SPDX-License-Identifier: MIT OR Apache-2.0
// metrale-bench-layers: the machine's read bandwidth, measured in this run, and for each preset
// the FFN's decode (GEMV), batched-decode and prefill (tile GEMM) rates in GB/s of weights and
// GFLOP/s, with the weight rate as a fraction of that bandwidth. Not a test: numbers, not
// verdicts. Progress on stderr; --json puts one JSON document on stdout.
#include "model/ffn.hpp"
#include "model/reference.hpp"
#include "selectors.hpp"

#include <metrale/log.hpp>
#include <metrale/registry.hpp>
#include <metrale/status.hpp>
#include <metrale/text_table.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

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

struct Rate {
  std::string preset;
  std::string path;  // decode / batched / prefill
  uint32_t m = 0;
  std::string kernels;
  double median_s = 0;
  double weight_bytes = 0;
  double gb_per_s = 0;
  double gflop_per_s = 0;
  double of_bandwidth = 0;
};

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
  uint32_t gemm_rows = 64;
  uint32_t repeat = 5;
  size_t bandwidth_mb = 1024;
  bool json = false;
  app.add_option("--backend", backend_name, "Backend (default: METRALE_BACKEND or the highest priority)");
  app.add_option("--presets", preset_list, "Presets to measure")->delimiter(',')->capture_default_str();
  app.add_option("--gemm-rows", gemm_rows, "Rows of the prefill (tile GEMM) pass")->capture_default_str();
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

    std::vector<Rate> rates;
    for (const auto& name : preset_list) {
      ModelConfig c = resolve_model(name);
      std::fprintf(stderr, "%s: generating and uploading synthetic weights...\n", name.c_str());
      FfnComponent ffn;
      {
        FfnWeights w = synthetic_ffn_weights(c, 1);
        ffn = FfnComponent::build(b, c, w);
      }  // host weights freed: the bench needs only the device copy
      for (auto [path, m] : {std::pair<const char*, uint32_t>{"decode", 1}, {"batched", 8}, {"prefill", gemm_rows}}) {
        std::fprintf(stderr, "%s: %s, m = %u...\n", name.c_str(), path, m);
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
        r.of_bandwidth = r.gb_per_s / peak;
        rates.push_back(r);
      }
    }

    if (json) {
      nlohmann::json out{{"backend", b.name()}, {"target", b.target()}, {"device", b.device_name()},
                         {"w4a16_k64_min_k", w4a16_k64_min_k()}, {"read_bandwidth_gb_per_s", peak}};
      for (const auto& p : bandwidth) out["read_bandwidth"].push_back({{"threads", p.threads}, {"gb_per_s", p.gb_per_s}});
      for (const auto& r : rates) {
        out["rates"].push_back({{"preset", r.preset},       {"path", r.path},
                                {"m", r.m},                 {"kernels", r.kernels},
                                {"median_s", r.median_s},   {"weight_bytes", r.weight_bytes},
                                {"weight_gb_per_s", r.gb_per_s}, {"gflop_per_s", r.gflop_per_s},
                                {"fraction_of_read_bandwidth", r.of_bandwidth}});
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
    std::vector<std::vector<std::string>> table;
    for (const auto& r : rates) {
      table.push_back({r.preset, r.path, std::to_string(r.m), f(r.median_s * 1e3, 2), f(r.weight_bytes / 1e6, 1),
                       f(r.gb_per_s, 2), f(r.gflop_per_s, 2), f(r.of_bandwidth, 3), r.kernels});
    }
    std::cout << render_table({"preset", "path", "m", "median ms", "weights MB", "GB/s", "GFLOP/s", "of read bw", "kernels"}, table);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "metrale-bench-layers: %s\n", e.what());
    return 1;
  }
}
