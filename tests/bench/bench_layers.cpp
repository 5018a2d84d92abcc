// SPDX-License-Identifier: MIT OR Apache-2.0
// metrale-bench-layers: the machine's read bandwidth and dot-product peaks, measured in this run
// per thread count; then, for each thread count of --threads (the CPU backend selected afresh
// with METRALE_CPU_THREADS set to it), each preset's FFN rate at each m of --m (decode GEMV,
// batched GEMV, tile GEMM) in GB/s of weights and GFLOP/s, as fractions of the bandwidth (weight
// rate) and of the bf16 dot peak (FLOP rate) measured on that thread count, and of the roofline
// (the shortest time those two allow); the scaling in m and in threads; the launch overhead of a
// one-block kernel through the runtime against the plugin's raw entry point and the cost of a
// warm try_kernel hit; and the worst figure per performance target (docs/perf.md). All ratios of the same run. Not
// a test: numbers, not verdicts. Progress on stderr; --json puts one JSON document on stdout.
#include "bench_machine.hpp"
#include "model/ffn.hpp"
#include "model/reference.hpp"
#include "selectors.hpp"

#include <layers/levers.hpp>
#include "test_support.hpp"

#include <metrale/levers.hpp>
#include <metrale/log.hpp>
#include <metrale/registry.hpp>
#include <metrale/status.hpp>
#include <metrale/text_table.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace {

using namespace metrale;
using namespace metrale::bench;
using namespace metrale::layers;
using Clock = std::chrono::steady_clock;

struct Rate {
  std::string preset;
  std::string ffn;   // dense / moe
  std::string path;  // decode / batched / prefill
  uint32_t m = 0;
  unsigned threads = 0;  // the backend's compute units (CPU: threads of its pool)
  std::string kernels;
  double median_s = 0;
  double weight_bytes = 0;
  double flops = 0;
  double gb_per_s = 0;
  double gflop_per_s = 0;
  double of_bandwidth = 0;  // weight rate / read bandwidth on the backend's thread count
  double of_bf16_peak = 0;  // FLOP rate / bf16 dot peak on the backend's thread count
  // Roofline on the same thread count: the shortest time the machine allows for the pass.
  double memory_s = 0;    // weight_bytes / read bandwidth
  double dot_s = 0;       // flops / bf16 dot peak (0: no bf16 peak measured)
  double roofline_s = 0;  // max(memory_s, dot_s)
  double of_roofline = 0; // roofline_s / median_s
  std::string bound;      // memory / dot: which term sets roofline_s
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

// A row's figures against the denominators bw (GB/s) and dot (GFLOP/s) of its thread count.
void set_ratios(Rate& r, double bw, double dot) {
  r.of_bandwidth = r.gb_per_s / bw;
  r.of_bf16_peak = dot > 0 ? r.gflop_per_s / dot : 0;
  r.memory_s = r.weight_bytes / (bw * 1e9);
  r.dot_s = dot > 0 ? r.flops / (dot * 1e9) : 0;
  r.roofline_s = std::max(r.memory_s, r.dot_s);
  r.bound = r.dot_s > r.memory_s ? "dot" : "memory";
  r.of_roofline = r.roofline_s / r.median_s;
}

// Every preset x m on one backend; bw (GB/s) and dot (GFLOP/s) are the denominators measured on
// its thread count.
std::vector<Rate> measure_rates(Backend& b, const std::vector<std::string>& presets,
                                const std::vector<uint32_t>& m_list, uint32_t repeat, unsigned threads, double bw,
                                double dot, CacheEvictor& evictor) {
  std::vector<Rate> rates;
  const std::string on = threads_label(threads);
  for (const auto& name : presets) {
    ModelConfig c = resolve_model(name);
    std::fprintf(stderr, "%s (%s): generating and uploading synthetic weights...\n", name.c_str(), on.c_str());
    FfnComponent ffn;
    {
      FfnWeights w = synthetic_ffn_weights(c, 1);
      ffn = FfnComponent::build(b, c, w);
    }  // host weights freed: the bench needs only the device copy
    for (uint32_t m : m_list) {
      const std::string path = path_of(m);
      std::fprintf(stderr, "%s (%s): %s, m = %u...\n", name.c_str(), on.c_str(), path.c_str(), m);
      auto x = synthetic_activations(m, c.hidden_size, 2);
      DeviceBuffer dx(b, x.size() * 2);
      dx.upload(std::span<const uint16_t>(x));
      ffn.forward(dx.ptr(), m);  // warm-up
      b.synchronize();
      std::vector<double> times;
      for (uint32_t i = 0; i < repeat; ++i) {
        evictor.evict();
        const double start = clock_now();
        ffn.forward(dx.ptr(), m);
        b.synchronize();
        times.push_back(seconds_since(start, threads));
      }
      std::sort(times.begin(), times.end());
      Rate r;
      r.preset = name;
      r.ffn = ffn_kind_name(c.ffn_kind());
      r.path = path;
      r.m = m;
      r.threads = threads;
      std::vector<std::string> seen;
      for (const auto& step : ffn.plan(m)) {
        if (step.step.find("gate_up") == std::string::npos && step.step.find("down") == std::string::npos) continue;
        if (std::find(seen.begin(), seen.end(), step.kernel) == seen.end()) seen.push_back(step.kernel);
      }
      for (const auto& k : seen) r.kernels += (r.kernels.empty() ? "" : ", ") + k;
      r.median_s = times[times.size() / 2];
      r.weight_bytes = static_cast<double>(ffn.last_weight_bytes());
      r.flops = pass_flops(c, m);
      r.gb_per_s = r.weight_bytes / r.median_s / 1e9;
      r.gflop_per_s = r.flops / r.median_s / 1e9;
      set_ratios(r, bw, dot);
      rates.push_back(r);
    }
  }
  return rates;
}

struct LaunchCost {
  double runtime_ns = 0;
  double raw_ns = 0;
  double try_kernel_ns = 0;
  uint32_t pool_blocks = 0;  // blocks of the hand-off launch: one per backend thread
  double pool_ns = 0;        // that launch through the runtime: wakes the pool's workers and joins them
};

// A one-block silu_mul (m = 1, 64 columns) through the runtime's typed launch against the same
// launch through the plugin's raw table, and a warm try_kernel hit; medians of per-sample means.
LaunchCost measure_launch(Backend& b, uint32_t launches) {
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
  // The same kernel with one tiny block per thread: what a multi-block launch adds for handing
  // blocks to the pool's workers and joining them (a one-block launch runs inline).
  const uint32_t blocks = std::max(1u, b.compute_units());
  DeviceBuffer gu_rows(b, size_t{blocks} * 2 * cols * 2), out_rows(b, size_t{blocks} * cols * 2);
  b.memset(gu_rows.ptr(), 0, size_t{blocks} * 2 * cols * 2);
  LaunchShape wide = shape;
  wide.grid = {1, blocks, 1};
  std::vector<double> via_pool;
  for (int sample = 0; sample < 7; ++sample) {
    const auto start = Clock::now();
    for (uint32_t i = 0; i < launches; ++i) b.launch(act, wide, gu_rows.ptr(), out_rows.ptr(), blocks, cols);
    via_pool.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() / launches);
  }
  b.synchronize();
  return {median(via_runtime), median(via_raw), median(lookups), blocks, median(via_pool)};
}

// One selection of the backend: the thread count asked for, the one it runs, the denominators
// measured on that count, and what was measured on it.
struct ThreadRun {
  unsigned requested = 0;  // 0: not the cpu backend (METRALE_CPU_THREADS ignored), measured once
  unsigned threads = 0;    // backend.compute_units()
  double read_bw = 0;      // GB/s on `threads`
  double dot_peak = 0;     // bf16 dot GFLOP/s on `threads`; 0: no AVX512_BF16
  std::vector<Rate> rates;
  LaunchCost launch;
};


// Scaling in m: consecutive m of one preset on one thread count. A step is a cliff when its time
// grows more than kCliff times what the roofline's growth explains.
constexpr double kCliff = 1.5;
struct MStep {
  std::string preset;
  unsigned threads = 0;
  uint32_t from_m = 0, to_m = 0;
  double time_ratio = 0;      // t(to_m) / t(from_m)
  double roofline_ratio = 0;  // t_min(to_m) / t_min(from_m)
  bool cliff = false;
};

std::vector<MStep> m_scaling(const ThreadRun& run, const std::string& preset) {
  std::vector<MStep> out;
  const Rate* previous = nullptr;
  for (const auto& r : run.rates) {
    if (r.preset != preset) continue;
    if (previous != nullptr) {
      MStep s;
      s.preset = preset;
      s.threads = run.threads;
      s.from_m = previous->m;
      s.to_m = r.m;
      s.time_ratio = r.median_s / previous->median_s;
      s.roofline_ratio = previous->roofline_s > 0 ? r.roofline_s / previous->roofline_s : 0;
      s.cliff = s.roofline_ratio > 0 && s.time_ratio > kCliff * s.roofline_ratio;
      out.push_back(s);
    }
    previous = &r;
  }
  return out;
}

// Scaling in threads: t(base) / t(N) for the same preset and m, next to the roofline's ratio.
struct ThreadStep {
  std::string preset;
  uint32_t m = 0;
  unsigned base_threads = 0, threads = 0;
  double speedup = 0;           // t(base) / t(threads)
  double roofline_speedup = 0;  // t_min(base) / t_min(threads)
};

std::vector<ThreadStep> thread_scaling(const std::vector<ThreadRun>& runs) {
  std::vector<ThreadStep> out;
  if (runs.size() < 2) return out;
  const ThreadRun& base = runs.front();
  for (size_t i = 1; i < runs.size(); ++i)
    for (const auto& r : runs[i].rates)
      for (const auto& b : base.rates)
        if (b.preset == r.preset && b.m == r.m)
          out.push_back({r.preset, r.m, base.threads, runs[i].threads, b.median_s / r.median_s,
                         r.roofline_s > 0 ? b.roofline_s / r.roofline_s : 0});
  return out;
}

// One line of the target summary: the worst figure among the rows a target covers, on one
// thread count. Ratio targets (1-3) are ">=": the worst is the lowest; the launch targets (4)
// are "<=": a single measured value.
struct TargetRow {
  int target = 0;
  std::string label;
  unsigned threads = 0;
  std::string metric;      // the rates' JSON key, or the launch figure
  std::string comparison;  // ">=" or "<="
  double goal = 0;
  size_t rows = 0;                         // rates covered (launch: 1)
  std::optional<double> worst;             // nullopt: no row covered
  std::string worst_preset;                // ratio targets: the row with the worst figure
  uint32_t worst_m = 0;
  std::optional<double> roofline_allows;   // the figure that row would have at its roofline
};

std::vector<TargetRow> targets_of(const ThreadRun& run) {
  std::vector<TargetRow> out;
  const std::string on = " (" + threads_label(run.threads) + ")";
  auto ratio = [&](int id, std::string label, std::string metric, double goal, auto covers, auto value, auto ceiling) {
    TargetRow t;
    t.target = id;
    t.label = std::to_string(id) + ". " + label + on;
    t.threads = run.threads;
    t.metric = std::move(metric);
    t.comparison = ">=";
    t.goal = goal;
    for (const auto& r : run.rates) {
      if (!covers(r)) continue;
      ++t.rows;
      if (!t.worst || value(r) < *t.worst) {
        t.worst = value(r);
        t.worst_preset = r.preset;
        t.worst_m = r.m;
        t.roofline_allows = r.roofline_s > 0 ? ceiling(r) / r.roofline_s : 0;
      }
    }
    out.push_back(t);
  };
  ratio(1, "decode m=1..8, dense FFN, of read bw", "fraction_of_read_bandwidth", 0.85,
        [](const Rate& r) { return r.ffn == "dense" && r.m <= 8; }, [](const Rate& r) { return r.of_bandwidth; },
        [](const Rate& r) { return r.memory_s; });
  ratio(2, "prefill m=64..512, of bf16 dot peak", "fraction_of_bf16_dot_peak", 0.60,
        [&](const Rate& r) { return run.dot_peak > 0 && r.m >= 64 && r.m <= 512; },
        [](const Rate& r) { return r.of_bf16_peak; }, [](const Rate& r) { return r.dot_s; });
  ratio(3, "MoE decode m=1, active experts of read bw", "fraction_of_read_bandwidth", 0.75,
        [](const Rate& r) { return r.ffn == "moe" && r.m == 1; }, [](const Rate& r) { return r.of_bandwidth; },
        [](const Rate& r) { return r.memory_s; });
  TargetRow overhead;
  overhead.target = 4;
  overhead.label = "4. launch overhead, us" + on;
  overhead.threads = run.threads;
  overhead.metric = "launch_overhead_us";
  overhead.comparison = "<=";
  overhead.goal = 2;
  overhead.rows = 1;
  overhead.worst = (run.launch.runtime_ns - run.launch.raw_ns) / 1e3;
  out.push_back(overhead);
  TargetRow lookup = overhead;
  lookup.label = "4. warm try_kernel hit, ns" + on;
  lookup.metric = "try_kernel_hit_ns";
  lookup.goal = 200;
  lookup.worst = run.launch.try_kernel_ns;
  out.push_back(lookup);
  return out;
}


}  // namespace

int main(int argc, char** argv) {
  metrale::layers::register_levers();  // before any lever is read, as every program using the layers does
  CLI::App app{"metrale-bench-layers: FFN GEMV/GEMM rates against this machine's measured read bandwidth"};
  std::string backend_name;
  std::vector<std::string> preset_list{"qwen3-32b", "qwen3-30b-a3b"};
  std::vector<uint32_t> m_list{1, 2, 4, 8, 16, 64, 256, 512};
  std::vector<unsigned> thread_list;
  uint32_t repeat = 3;
  uint32_t launches = 2000;
  size_t bandwidth_mb = 1024;
  size_t evict_mb = 256;
  bool json = false;
  app.add_option("--backend", backend_name, "Backend (default: METRALE_BACKEND or the highest priority)");
  app.add_option("--presets", preset_list, "Presets to measure")->delimiter(',')->capture_default_str();
  app.add_option("--m", m_list, "Rows (tokens) per pass to measure, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(uint32_t{1}, UINT32_MAX))
      ->capture_default_str();
  app.add_option("--threads", thread_list,
                 "CPU backend thread counts to measure, comma-separated (default: 1 and the CPUs in the affinity mask)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 1024u));  // the CPU backend's limit
  app.add_option("--launches", launches, "Launches per launch-overhead sample")->capture_default_str();
  app.add_option("--repeat", repeat, "Timed passes per rate (median)")->capture_default_str();
  app.add_option("--bandwidth-mb", bandwidth_mb, "Buffer size of the bandwidth measurement")->capture_default_str();
  app.add_option("--evict-mb", evict_mb,
                 "Buffer read before each timed pass to push the weights out of the caches (0: keep them warm)")
      ->capture_default_str();
  app.add_flag("--json", json, "JSON on stdout");
  bool cpu_time = false;
  app.add_flag("--cpu-time", cpu_time,
               "Time the passes and the denominators with the process's CPU time over the threads at work instead of "
               "wall time (an oversubscribed machine stretches the latter); launch costs stay wall time");
  CLI11_PARSE(app, argc, argv);
  use_cpu_time(cpu_time);
  repeat = std::max(repeat, 1u);
  launches = std::max(launches, 1u);
  // Ascending and distinct: the scaling tables compare neighbours, the thread scaling the first.
  std::sort(m_list.begin(), m_list.end());
  m_list.erase(std::unique(m_list.begin(), m_list.end()), m_list.end());
  if (thread_list.empty()) thread_list = {1, affinity_cpus()};
  std::sort(thread_list.begin(), thread_list.end());
  thread_list.erase(std::unique(thread_list.begin(), thread_list.end()), thread_list.end());

  try {
    configure_logging();
    const std::vector<unsigned> counts = denominator_counts(thread_list);
    std::fprintf(stderr, "measuring read bandwidth over %zu MB...\n", bandwidth_mb);
    uint64_t sink = 0;
    auto bandwidth = measure_read_bandwidth(bandwidth_mb << 20, 5, counts, sink);
    double peak = 0;
    for (const auto& p : bandwidth) peak = std::max(peak, p.gb_per_s);
    std::fprintf(stderr, "measuring bf16 dot and f32 FMA peaks...\n");
    const auto peaks = measure_peaks(counts);

    // Each thread count selects the backend afresh: METRALE_CPU_THREADS is read at discovery.
    std::vector<ThreadRun> runs;
    std::string name, target, device;
    CacheEvictor evictor(evict_mb << 20);
    {
      for (unsigned requested : thread_list) {
        auto backend = backend_on_threads(requested, backend_name);
        Backend& b = *backend;
        name = b.name();
        target = b.target();
        device = b.device_name();
        const bool cpu = b.name() == "cpu";
        ThreadRun run;
        run.requested = cpu ? requested : 0;
        run.threads = std::max(1u, b.compute_units());
        if (!cpu)
          std::fprintf(stderr, "backend %s ignores METRALE_CPU_THREADS: measuring once, on its %u compute units\n",
                       b.name().c_str(), run.threads);
        else if (run.threads != requested)
          std::fprintf(stderr, "asked the cpu backend for %u threads, it runs %u: measuring on %u\n", requested,
                       run.threads, run.threads);
        run.read_bw = at_threads(bandwidth, run.threads, [](const BandwidthPoint& p) { return p.gb_per_s; });
        run.dot_peak = at_threads(peaks, run.threads, [](const PeakPoint& p) { return p.bf16_dot_gflop_per_s; });
        run.rates = measure_rates(b, preset_list, m_list, repeat, run.threads, run.read_bw, run.dot_peak, evictor);
        std::fprintf(stderr, "measuring launch overhead (%s)...\n", threads_label(run.threads).c_str());
        run.launch = measure_launch(b, launches);
        runs.push_back(std::move(run));
        if (!cpu) break;
      }
    }
    // The bandwidth a shared machine gives swings from minute to minute: measure it again at the
    // end and hold every row to the better of the two, so no ratio flatters a quiet spell.
    std::fprintf(stderr, "measuring read bandwidth again...\n");
    remeasure_read_bandwidth(bandwidth, bandwidth_mb << 20, 5, sink);
    for (const auto& p : bandwidth) peak = std::max(peak, p.gb_per_s);
    for (auto& run : runs) {
      run.read_bw = at_threads(bandwidth, run.threads, [](const BandwidthPoint& p) { return p.gb_per_s; });
      for (auto& r : run.rates) set_ratios(r, run.read_bw, run.dot_peak);
    }
    const auto by_threads = thread_scaling(runs);
    std::vector<TargetRow> targets;
    for (const auto& run : runs)
      for (auto& t : targets_of(run)) targets.push_back(std::move(t));
    std::sort(targets.begin(), targets.end(), [](const TargetRow& a, const TargetRow& b) {
      return a.target != b.target ? a.target < b.target : a.threads < b.threads;
    });

    if (json) {
      const ThreadRun& last = runs.back();  // the most threads: the keys a one-count run had
      nlohmann::json out{{"backend", name}, {"target", target}, {"device", device},
                         {"w4a16_k64_min_k", w4a16_k64_min_k()}, {"read_bandwidth_gb_per_s", peak}};
      for (const auto& p : bandwidth)
        out["read_bandwidth"].push_back({{"threads", p.threads}, {"gb_per_s", p.gb_per_s},
                                         {"at_start_gb_per_s", p.at_start}, {"at_end_gb_per_s", p.at_end}});
      for (const auto& p : peaks)
        out["peaks"].push_back({{"threads", p.threads}, {"bf16_dot_gflop_per_s", p.bf16_dot_gflop_per_s},
                                {"f32_fma_gflop_per_s", p.fma_gflop_per_s}});
      auto launch_json = [](const LaunchCost& l) {
        return nlohmann::json{{"runtime_ns", l.runtime_ns}, {"raw_table_ns", l.raw_ns},
                              {"overhead_ns", l.runtime_ns - l.raw_ns}, {"try_kernel_hit_ns", l.try_kernel_ns},
                              {"pool_blocks", l.pool_blocks}, {"pool_launch_ns", l.pool_ns}};
      };
      out["threads"] = last.threads;
      out["read_bandwidth_at_threads_gb_per_s"] = last.read_bw;
      out["bf16_dot_peak_at_threads_gflop_per_s"] = last.dot_peak;
      out["launch"] = launch_json(last.launch);
      out["thread_counts"] = nlohmann::json::array();
      for (const auto& run : runs) {
        out["thread_counts"].push_back({{"threads", run.threads},
                                        {"requested_threads", run.requested ? nlohmann::json(run.requested) : nullptr},
                                        {"read_bandwidth_gb_per_s", run.read_bw},
                                        {"bf16_dot_peak_gflop_per_s", run.dot_peak},
                                        {"launch", launch_json(run.launch)}});
      }
      out["rates"] = nlohmann::json::array();
      for (const auto& run : runs)
        for (const auto& r : run.rates) {
          out["rates"].push_back({{"preset", r.preset},       {"path", r.path},
                                  {"m", r.m},                 {"kernels", r.kernels},
                                  {"median_s", r.median_s},   {"weight_bytes", r.weight_bytes},
                                  {"weight_gb_per_s", r.gb_per_s}, {"gflop_per_s", r.gflop_per_s},
                                  {"fraction_of_read_bandwidth", r.of_bandwidth},
                                  {"fraction_of_bf16_dot_peak", r.of_bf16_peak},
                                  {"threads", r.threads},     {"ffn", r.ffn},
                                  {"flops", r.flops},         {"roofline_s", r.roofline_s},
                                  {"of_roofline", r.of_roofline}, {"bound", r.bound}});
        }
      out["scaling"] = {{"m", nlohmann::json::array()}, {"threads", nlohmann::json::array()}, {"cliff_factor", kCliff}};
      for (const auto& run : runs)
        for (const auto& preset : preset_list)
          for (const auto& s : m_scaling(run, preset))
            out["scaling"]["m"].push_back({{"preset", s.preset}, {"threads", s.threads}, {"from_m", s.from_m},
                                           {"to_m", s.to_m}, {"time_ratio", s.time_ratio},
                                           {"roofline_ratio", s.roofline_ratio}, {"cliff", s.cliff}});
      for (const auto& s : by_threads)
        out["scaling"]["threads"].push_back({{"preset", s.preset}, {"m", s.m}, {"base_threads", s.base_threads},
                                             {"threads", s.threads}, {"speedup", s.speedup},
                                             {"roofline_speedup", s.roofline_speedup}});
      out["targets"] = nlohmann::json::array();
      for (const auto& t : targets) {
        nlohmann::json j{{"target", t.target},   {"label", t.label},   {"threads", t.threads},
                         {"metric", t.metric},   {"comparison", t.comparison}, {"goal", t.goal},
                         {"rows", t.rows},       {"worst", t.worst ? nlohmann::json(*t.worst) : nullptr}};
        if (t.target != 4) {
          j["worst_preset"] = t.worst ? nlohmann::json(t.worst_preset) : nullptr;
          j["worst_m"] = t.worst ? nlohmann::json(t.worst_m) : nullptr;
          j["roofline_allows"] = t.roofline_allows ? nlohmann::json(*t.roofline_allows) : nullptr;
        }
        out["targets"].push_back(std::move(j));
      }
      out["evict_mb"] = evict_mb;
      out["repeat"] = repeat;
      out["sink"] = (sink + evictor.sink()) % 2;  // keeps the read loops observable
      std::cout << out.dump(2) << '\n';
      return 0;
    }
    auto f = [](double v, int digits) {
      char text[64];
      std::snprintf(text, sizeof text, "%.*f", digits, v);
      return std::string(text);
    };
    std::cout << "backend " << name << " (" << target << ", " << device << ")\n\nread bandwidth (sum of u64, best of 5, "
              << bandwidth_mb << " MB):\n";
    std::vector<std::vector<std::string>> bw;
    for (const auto& p : bandwidth)
      bw.push_back({std::to_string(p.threads), f(p.at_start, 2), f(p.at_end, 2), f(p.gb_per_s, 2)});
    std::cout << render_table({"threads", "GB/s at start", "at end", "used (the better)"}, bw) << "peak " << f(peak, 2) << " GB/s (checksum parity " << sink % 2 << ")\n\n";
    std::vector<std::vector<std::string>> pk;
    for (const auto& p : peaks) pk.push_back({std::to_string(p.threads), f(p.bf16_dot_gflop_per_s, 1), f(p.fma_gflop_per_s, 1)});
    std::cout << "register-only peaks (best of 3):\n" << render_table({"threads", "bf16 dot GFLOP/s", "f32 FMA GFLOP/s"}, pk);
    std::cout << "\npasses: median of " << repeat << ", "
              << (evict_mb ? "caches evicted before each (" + std::to_string(evict_mb) + " MB read, parity " +
                                 std::to_string(evictor.sink() % 2) + ")"
                           : std::string("caches warm (--evict-mb 0)"))
              << "\n";
    for (const auto& run : runs) {
      std::cout << "\n== backend threads " << run.threads << ": read bandwidth " << f(run.read_bw, 2) << " GB/s, bf16 dot peak "
                << f(run.dot_peak, 1) << " GFLOP/s (the denominators below) ==\n";
      std::vector<std::vector<std::string>> table;
      for (const auto& r : run.rates) {
        table.push_back({r.preset, r.path, std::to_string(r.m), f(r.median_s * 1e3, 2), f(r.weight_bytes / 1e6, 1),
                         f(r.gb_per_s, 2), f(r.gflop_per_s, 2), f(r.of_bandwidth, 3), f(r.of_bf16_peak, 3),
                         f(r.roofline_s * 1e3, 2), r.bound, f(r.of_roofline, 3), r.kernels});
      }
      std::cout << render_table({"preset", "path", "m", "median ms", "weights MB", "GB/s", "GFLOP/s", "of read bw",
                                 "of bf16 peak", "roofline ms", "bound", "of roofline", "kernels"},
                                table);
      for (const auto& preset : preset_list) {
        const auto steps = m_scaling(run, preset);
        if (steps.empty()) continue;
        std::vector<std::vector<std::string>> st;
        for (const auto& s : steps)
          st.push_back({std::to_string(s.from_m) + " -> " + std::to_string(s.to_m), f(s.time_ratio, 2),
                        f(s.roofline_ratio, 2), s.cliff ? "cliff" : "-"});
        std::cout << "\nscaling in m, " << preset << ", " << threads_label(run.threads) << " (cliff: time ratio > "
                  << f(kCliff, 1) << " x roofline ratio):\n"
                  << render_table({"m", "t ratio", "roofline ratio", "step"}, st);
      }
      std::cout << "\nlaunch, one block (act/silu_mul, m=1, 64 columns): runtime " << f(run.launch.runtime_ns / 1e3, 3)
                << " us, raw plugin table " << f(run.launch.raw_ns / 1e3, 3) << " us, overhead "
                << f((run.launch.runtime_ns - run.launch.raw_ns) / 1e3, 3) << " us; warm try_kernel hit "
                << f(run.launch.try_kernel_ns, 0) << " ns\n";
      std::cout << "launch, " << run.launch.pool_blocks << " blocks (one per thread, pool hand-off): runtime "
                << f(run.launch.pool_ns / 1e3, 3) << " us\n";
    }
    if (!by_threads.empty()) {
      std::vector<std::vector<std::string>> st;
      for (const auto& s : by_threads)
        st.push_back({s.preset, std::to_string(s.m),
                      std::to_string(s.base_threads) + " -> " + std::to_string(s.threads), f(s.speedup, 2),
                      f(s.roofline_speedup, 2)});
      const std::string base = "t(" + std::to_string(runs.front().threads) + ")/t(N)";
      std::cout << "\nscaling in threads (N: the thread count after the arrow):\n"
                << render_table({"preset", "m", "threads", base, "roofline " + base}, st);
    }
    std::vector<std::vector<std::string>> tt;
    for (const auto& t : targets) {
      const int digits = t.target == 4 ? (t.metric == "try_kernel_hit_ns" ? 0 : 3) : 3;
      const bool ratio = t.target != 4;
      tt.push_back({t.label, std::to_string(t.rows), t.worst ? f(*t.worst, digits) : "n/a",
                    t.comparison + " " + (ratio ? f(t.goal, 2) : f(t.goal, 0)),
                    !ratio ? "-" : t.worst ? t.worst_preset + " m=" + std::to_string(t.worst_m) : "no row measured",
                    ratio && t.roofline_allows ? f(*t.roofline_allows, 3) : "-"});
    }
    std::cout << "\nperformance targets (worst figure among the rows each covers; \"roofline allows\": that row's "
                 "figure at its roofline):\n"
              << render_table({"target", "rows", "worst", "goal", "worst at", "roofline allows"}, tt);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "metrale-bench-layers: %s\n", e.what());
    return 1;
  }
}
