// SPDX-License-Identifier: MIT OR Apache-2.0
#include "bench_report.hpp"

#include "linear/selectors.hpp"

#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

namespace metrale::bench {

namespace {

using nlohmann::json;

std::string f(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return std::string(text);
}

json launch_json(const LaunchCost& l) {
  return json{{"runtime_ns", l.runtime_ns}, {"raw_table_ns", l.raw_ns},
              {"overhead_ns", l.runtime_ns - l.raw_ns}, {"try_kernel_hit_ns", l.try_kernel_ns},
              {"pool_blocks", l.pool_blocks}, {"pool_launch_ns", l.pool_ns}};
}

json rate_json(const Rate& r) {
  return json{{"preset", r.preset},       {"variant", r.variant},   {"path", r.path},
              {"m", r.m},                 {"context", r.context},   {"kernels", r.kernels},   {"median_s", r.median_s},
              {"weight_bytes", r.weight_bytes}, {"weight_gb_per_s", r.gb_per_s}, {"gflop_per_s", r.gflop_per_s},
              {"fraction_of_read_bandwidth", r.of_bandwidth}, {"fraction_of_bf16_dot_peak", r.of_bf16_peak},
              {"fraction_of_tier_dot_peak", r.of_tier_peak},
              {"fraction_of_int8_dot_peak", r.of_int8_peak}, {"threads", r.threads}, {"ffn", r.ffn},
              {"flops", r.flops},         {"roofline_s", r.roofline_s}, {"of_roofline", r.of_roofline},
              {"bound", r.bound}};
}

json scaling_json(const Report& rep) {
  json out{{"m", json::array()}, {"threads", json::array()}, {"cliff_factor", kCliff}};
  for (const auto& run : rep.runs)
    for (const auto& preset : rep.presets)
      for (const auto& variant : rep.variants)
        for (const auto& s : m_scaling(run, preset, variant))
          out["m"].push_back({{"preset", s.preset}, {"variant", s.variant}, {"threads", s.threads},
                              {"from_m", s.from_m}, {"to_m", s.to_m}, {"time_ratio", s.time_ratio},
                              {"roofline_ratio", s.roofline_ratio}, {"cliff", s.cliff}});
  for (const auto& s : thread_scaling(rep.runs))
    out["threads"].push_back({{"preset", s.preset}, {"variant", s.variant}, {"m", s.m}, {"context", s.context},
                              {"base_threads", s.base_threads}, {"threads", s.threads}, {"speedup", s.speedup},
                              {"roofline_speedup", s.roofline_speedup}});
  return out;
}

void print_rows(const Report& rep, const ThreadRun& run) {
  std::cout << "\n== backend threads " << run.threads << ": read bandwidth " << f(run.d.read_bw, 2)
            << " GB/s, bf16 dot peak " << f(run.d.bf16_dot, 1) << " GFLOP/s, int8 dot peak " << f(run.d.int8_dot, 1)
            << " GOP/s, tier dot peak " << f(run.d.tier_dot, 1) << " GFLOP/s (the denominators below) ==\n";
  std::vector<std::vector<std::string>> table;
  for (const auto& r : run.rates)
    table.push_back({r.preset, r.variant, r.path, std::to_string(r.m), r.context ? std::to_string(r.context) : "-",
                     f(r.median_s * 1e3, 2),
                     f(r.weight_bytes / 1e6, 1), f(r.gb_per_s, 2), f(r.gflop_per_s, 2), f(r.of_bandwidth, 3),
                     f(r.of_bf16_peak, 3), f(r.of_tier_peak, 3), r.int8_dot ? f(r.of_int8_peak, 3) : "-",
                     f(r.roofline_s * 1e3, 2), r.bound,
                     f(r.of_roofline, 3), r.kernels});
  std::cout << render_table({"preset", "weights", "path", "m", "context", "median ms", "weights MB", "GB/s", "GFLOP/s",
                             "of read bw", "of bf16 peak", "of tier peak", "of int8 peak", "roofline ms", "bound", "of roofline",
                             "kernels"},
                            table);
  for (const auto& preset : rep.presets)
    for (const auto& variant : rep.variants) {
      const auto steps = m_scaling(run, preset, variant);
      if (steps.empty()) continue;
      std::vector<std::vector<std::string>> st;
      for (const auto& s : steps)
        st.push_back({std::to_string(s.from_m) + " -> " + std::to_string(s.to_m), f(s.time_ratio, 2),
                      f(s.roofline_ratio, 2), s.cliff ? "cliff" : "-"});
      std::cout << "\nscaling in m, " << preset << " " << variant << ", " << threads_label(run.threads)
                << " (cliff: time ratio > " << f(kCliff, 1) << " x roofline ratio):\n"
                << render_table({"m", "t ratio", "roofline ratio", "step"}, st);
    }
  std::cout << "\nlaunch, one block (act/silu_mul, m=1, 64 columns): runtime " << f(run.launch.runtime_ns / 1e3, 3)
            << " us, raw plugin table " << f(run.launch.raw_ns / 1e3, 3) << " us, overhead "
            << f((run.launch.runtime_ns - run.launch.raw_ns) / 1e3, 3) << " us; warm try_kernel hit "
            << f(run.launch.try_kernel_ns, 0) << " ns\n";
  std::cout << "launch, " << run.launch.pool_blocks << " blocks (one per thread, pool hand-off): runtime "
            << f(run.launch.pool_ns / 1e3, 3) << " us\n";
}

void print_denominators(const Report& rep) {
  std::cout << "backend " << rep.backend << " (" << rep.target << ", " << rep.device
            << ")\n\nread bandwidth (sum of u64: one stream or 8 prefetched streams, best of 5 each, " << rep.bandwidth_mb << " MB):\n";
  std::vector<std::vector<std::string>> bw;
  for (const auto& p : rep.bandwidth)
    bw.push_back({std::to_string(p.threads), f(p.at_start, 2), f(p.at_end, 2), f(p.gb_per_s, 2)});
  std::cout << render_table({"threads", "GB/s at start", "at end", "used (the better)"}, bw) << "peak "
            << f(rep.peak_bandwidth, 2) << " GB/s (checksum parity " << rep.sink % 2 << ")\n\n";
  std::vector<std::vector<std::string>> pk;
  for (const auto& p : rep.peaks)
    pk.push_back({std::to_string(p.threads), f(p.bf16_dot_gflop_per_s, 1), f(p.int8_dot_gop_per_s, 1),
                  f(p.fma_gflop_per_s, 1)});
  std::cout << "register-only peaks (best of 3):\n"
            << render_table({"threads", "bf16 dot GFLOP/s (vdpbf16ps)", "int8 dot GOP/s (vpdpbusd)", "f32 FMA GFLOP/s"},
                            pk);
  std::cout << peak_scaling_note(rep.peaks);
  std::cout << (rep.cpu_time ? "times: CPU time over the threads at work\n" : "times: wall clock\n");
  std::cout << "passes: median of " << rep.repeat << ", "
            << (rep.evict_mb ? "caches evicted before each (" + std::to_string(rep.evict_mb) + " MB read, parity " +
                                   std::to_string(rep.evictor_sink % 2) + ")"
                             : std::string("caches warm (--evict-mb 0)"))
            << "\n" << eviction_note(rep.evict_mb, rep.llc) << "\n";
}

}  // namespace

std::vector<MStep> m_scaling(const ThreadRun& run, const std::string& preset, const std::string& variant) {
  std::vector<MStep> out;
  const Rate* previous = nullptr;
  for (const auto& r : run.rates) {
    if (r.preset != preset || r.variant != variant || r.context != 0) continue;  // attention rows: no m steps
    if (previous != nullptr) {
      MStep s{preset, variant, run.threads, previous->m, r.m, r.median_s / previous->median_s, 0, false};
      s.roofline_ratio = previous->roofline_s > 0 ? r.roofline_s / previous->roofline_s : 0;
      s.cliff = s.roofline_ratio > 0 && s.time_ratio > kCliff * s.roofline_ratio;
      out.push_back(s);
    }
    previous = &r;
  }
  return out;
}

std::vector<ThreadStep> thread_scaling(const std::vector<ThreadRun>& runs) {
  std::vector<ThreadStep> out;
  if (runs.size() < 2) return out;
  const ThreadRun& base = runs.front();
  for (size_t i = 1; i < runs.size(); ++i)
    for (const auto& r : runs[i].rates)
      for (const auto& b : base.rates)
        if (b.preset == r.preset && b.variant == r.variant && b.m == r.m && b.context == r.context)
          out.push_back({r.preset, r.variant, r.m, r.context, base.threads, runs[i].threads, b.median_s / r.median_s,
                         r.roofline_s > 0 ? b.roofline_s / r.roofline_s : 0});
  return out;
}

void print_json(const Report& rep) {
  const ThreadRun& last = rep.runs.back();  // the most threads: the keys a one-count run had
  json out{{"backend", rep.backend}, {"target", rep.target}, {"device", rep.device},
           {"w4a16_k64_min_k", layers::w4a16_k64_min_k()}, {"read_bandwidth_gb_per_s", rep.peak_bandwidth}};
  for (const auto& p : rep.bandwidth)
    out["read_bandwidth"].push_back({{"threads", p.threads}, {"gb_per_s", p.gb_per_s},
                                     {"at_start_gb_per_s", p.at_start}, {"at_end_gb_per_s", p.at_end}});
  for (const auto& p : rep.peaks)
    out["peaks"].push_back({{"threads", p.threads}, {"bf16_dot_gflop_per_s", p.bf16_dot_gflop_per_s},
                            {"int8_dot_gop_per_s", p.int8_dot_gop_per_s}, {"f32_fma_gflop_per_s", p.fma_gflop_per_s}});
  out["threads"] = last.threads;
  out["read_bandwidth_at_threads_gb_per_s"] = last.d.read_bw;
  out["bf16_dot_peak_at_threads_gflop_per_s"] = last.d.bf16_dot;
  out["int8_dot_peak_at_threads_gop_per_s"] = last.d.int8_dot;
  out["launch"] = launch_json(last.launch);
  out["thread_counts"] = json::array();
  for (const auto& run : rep.runs)
    out["thread_counts"].push_back({{"threads", run.threads},
                                    {"requested_threads", run.requested ? json(run.requested) : nullptr},
                                    {"read_bandwidth_gb_per_s", run.d.read_bw},
                                    {"bf16_dot_peak_gflop_per_s", run.d.bf16_dot},
                                    {"int8_dot_peak_gop_per_s", run.d.int8_dot},
                                    {"tier_dot_peak_gflop_per_s", run.d.tier_dot},
                                    {"launch", launch_json(run.launch)}});
  out["rates"] = json::array();
  for (const auto& run : rep.runs)
    for (const auto& r : run.rates) out["rates"].push_back(rate_json(r));
  out["scaling"] = scaling_json(rep);
  out["targets"] = json::array();
  for (const auto& t : rep.targets) out["targets"].push_back(target_json(t));
  out["evict_mb"] = rep.evict_mb;
  out["last_level_cache"] = rep.llc ? json{{"level", rep.llc->level}, {"bytes", rep.llc->bytes}, {"instances", rep.llc->instances}}
                                    : json(nullptr);
  out["repeat"] = rep.repeat;
  out["cpu_time"] = rep.cpu_time;
  out["sink"] = (rep.sink + rep.evictor_sink) % 2;  // keeps the read loops observable
  std::cout << out.dump(2) << '\n';
}

void print_text(const Report& rep) {
  print_denominators(rep);
  for (const auto& run : rep.runs) print_rows(rep, run);
  const auto by_threads = thread_scaling(rep.runs);
  if (!by_threads.empty()) {
    std::vector<std::vector<std::string>> st;
    for (const auto& s : by_threads)
      st.push_back({s.preset, s.variant, std::to_string(s.m), s.context ? std::to_string(s.context) : "-",
                    std::to_string(s.base_threads) + " -> " + std::to_string(s.threads), f(s.speedup, 2),
                    f(s.roofline_speedup, 2)});
    const std::string base = "t(" + std::to_string(rep.runs.front().threads) + ")/t(N)";
    std::cout << "\nscaling in threads (N: the thread count after the arrow):\n"
              << render_table({"preset", "weights", "m", "context", "threads", base, "roofline " + base}, st);
  }
  std::vector<std::vector<std::string>> tt;
  for (const auto& t : rep.targets) tt.push_back(target_cells(t));
  std::cout << "\nperformance targets (worst figure among the rows each covers; \"roofline allows\": that row's "
               "figure at its roofline):\n"
            << render_table({"target", "rows", "worst", "goal", "worst at", "roofline allows"}, tt);
}

}  // namespace metrale::bench
