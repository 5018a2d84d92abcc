// SPDX-License-Identifier: MIT OR Apache-2.0
// What metrale-bench-layers prints: the denominators, each thread count's rows, the scaling in m
// and in threads, the launch costs and the target summary, as text tables or one JSON document.
#pragma once

#include "bench_machine.hpp"
#include "bench_rows.hpp"
#include "bench_targets.hpp"

#include <string>
#include <vector>

namespace metrale::bench {

// Scaling in m: consecutive m of one preset and variant on one thread count. A step is a cliff
// when its time grows more than kCliff times what the roofline's growth explains.
constexpr double kCliff = 1.5;
struct MStep {
  std::string preset, variant;
  unsigned threads = 0;
  uint32_t from_m = 0, to_m = 0;
  double time_ratio = 0;      // t(to_m) / t(from_m)
  double roofline_ratio = 0;  // t_min(to_m) / t_min(from_m)
  bool cliff = false;
};
std::vector<MStep> m_scaling(const ThreadRun& run, const std::string& preset, const std::string& variant);

// Scaling in threads: t(base) / t(N) for the same preset, variant and m.
struct ThreadStep {
  std::string preset, variant;
  uint32_t m = 0;
  uint32_t context = 0;  // attention rows (Rate::context)
  unsigned base_threads = 0, threads = 0;
  double speedup = 0;           // t(base) / t(threads)
  double roofline_speedup = 0;  // t_min(base) / t_min(threads)
};
std::vector<ThreadStep> thread_scaling(const std::vector<ThreadRun>& runs);

// Everything one run measured.
struct Report {
  std::string backend, target, device;
  std::vector<BandwidthPoint> bandwidth;
  double peak_bandwidth = 0;
  std::vector<PeakPoint> peaks;
  std::vector<ThreadRun> runs;
  std::vector<TargetRow> targets;
  std::vector<std::string> presets, variants;
  size_t bandwidth_mb = 0, evict_mb = 0;
  std::optional<LastLevelCache> llc;  // what the eviction is sized against
  uint32_t repeat = 0;
  uint64_t sink = 0, evictor_sink = 0;
  bool cpu_time = false;
};

void print_json(const Report& r);
void print_text(const Report& r);

}  // namespace metrale::bench
