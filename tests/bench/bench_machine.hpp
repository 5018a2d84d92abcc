// SPDX-License-Identifier: MIT OR Apache-2.0
// What the benchmarks (bench_layers.cpp, bench_kernels.cpp) hold their rates against, measured
// in the same run: the machine's read bandwidth and register-only dot-product peaks per thread
// count; a cache eviction before each timed pass; the backend selected afresh on a thread count
// (METRALE_CPU_THREADS scoped, the user's value put back).
#pragma once

#include <metrale/backend.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace metrale::bench {

// The clock the denominators and bench_kernels' passes are timed with: wall time, or, after
// use_cpu_time(true), the process's CPU time divided by the threads at work: what the work
// takes on a core of its own when other processes share the machine (an oversubscribed machine
// stretches wall time, not CPU time). Workers that spin while idle count as busy.
void use_cpu_time(bool on);
double clock_now();
double seconds_since(double start, unsigned threads);

struct BandwidthPoint {
  unsigned threads;
  double gb_per_s;        // the denominator: the better of the measurements
  double at_start = 0;    // GB/s measured before the rows, and after them
  double at_end = 0;
};

// The thread counts the denominators are measured on: 1, 2, 4 ... below the hardware threads,
// the hardware threads, and every count of `requested`, ascending.
std::vector<unsigned> denominator_counts(const std::vector<unsigned>& requested);

// A streaming u64 sum over `bytes` (2 MiB aligned, transparent huge pages asked for, like the
// CPU backend's weight buffers), best of `reps` per thread count; `sink` keeps the reads.
std::vector<BandwidthPoint> measure_read_bandwidth(size_t bytes, unsigned reps, const std::vector<unsigned>& counts,
                                                   uint64_t& sink);
// The same again, each point held to the better of the two (a shared machine's bandwidth swings
// from minute to minute); at_start and at_end keep both.
void remeasure_read_bandwidth(std::vector<BandwidthPoint>& points, size_t bytes, unsigned reps, uint64_t& sink);

struct PeakPoint {
  unsigned threads;
  double bf16_dot_gflop_per_s;  // vdpbf16ps zmm; 0: the CPU lacks AVX512_BF16
  double fma_gflop_per_s;       // f32 FMA at the widest width the CPU has; 0: none
  double int8_dot_gop_per_s;    // vpdpbusd zmm, 2 ops per multiply-add; 0: no AVX512_VNNI
};

// Register-only loops (12 independent accumulators, no memory traffic), best of 3 per thread
// count, all threads running the loop at once.
std::vector<PeakPoint> measure_peaks(const std::vector<unsigned>& counts);

// The value of the point with the largest thread count not above `threads`.
template <class P, class F>
double at_threads(const std::vector<P>& points, unsigned threads, F field) {
  double v = 0;
  for (const auto& p : points)
    if (p.threads <= threads) v = field(p);
  return v;
}

double median(std::vector<double> values);
// The CPUs in the process's affinity mask (the CPU backend's default thread count).
unsigned affinity_cpus();
std::string threads_label(unsigned threads);

// The last-level cache as sysfs describes it (/sys/devices/system/cpu/cpu*/cache/index*): the
// highest level's size summed over its distinct instances (one per socket or CCX), or nullopt
// where sysfs says nothing.
struct LastLevelCache {
  uint32_t level = 0;
  size_t bytes = 0;        // all instances together
  uint32_t instances = 0;
};
std::optional<LastLevelCache> last_level_cache(const std::string& sysfs_cpu_dir = "/sys/devices/system/cpu");
// The default --evict-mb: twice the last-level cache, at least `floor_mb`.
size_t default_evict_mb(const std::optional<LastLevelCache>& llc, size_t floor_mb = 256);
// One line for the reports: the cache the eviction was sized against, and a warning when
// `evict_mb` (non-zero) is under twice it (decode rows may then be served from the cache).
std::string eviction_note(size_t evict_mb, const std::optional<LastLevelCache>& llc);
// A warning for each thread count whose register-only peak did not grow to at least 0.75 x the
// threads x the one-thread peak: something else held the CPUs while it was measured (a busy
// host steals vCPUs from a VM), so the ratios against it read high. "" when every peak scales.
std::string peak_scaling_note(const std::vector<PeakPoint>& peaks);

// Reads a buffer several times the size of the last-level cache before each timed pass, so the
// weights of a pass come from memory, as they do in a model whose layers do not fit the cache.
// Size 0 keeps the caches warm.
class CacheEvictor {
 public:
  explicit CacheEvictor(size_t bytes);
  // Reads the buffer on `threads` threads (the pass's own count), a share each: every core's
  // private cache is evicted, not only the caller's, and no CPU of the pass idles through the
  // milliseconds of the read. On a VM a vCPU that idled that long may take a millisecond or more
  // to be scheduled again, which the pool's wake-up launches cannot hide (AMD EPYC Zen 3 guest:
  // a 2-thread, 1 ms pool run after 20 ms idle took 2 ms in 31-38 of 40 runs; after 20 ms with
  // both CPUs busy, 4-5 of 40).
  void evict(unsigned threads);
  uint64_t sink() const { return sink_; }

 private:
  size_t words_;
  std::unique_ptr<uint64_t[]> buffer_;
  uint64_t sink_ = 0;
};

// Discovers the backends with METRALE_CPU_THREADS set to `threads` (read at discovery; the
// user's value is put back) and selects `name` (empty: METRALE_BACKEND or the highest priority).
std::shared_ptr<Backend> backend_on_threads(unsigned threads, const std::string& name);

}  // namespace metrale::bench
