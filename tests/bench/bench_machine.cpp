// SPDX-License-Identifier: MIT OR Apache-2.0
#include "bench_machine.hpp"

#include "test_support.hpp"

#include <metrale/registry.hpp>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sched.h>
#endif
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <cstdlib>
#include <ctime>
#include <stdexcept>
#include <thread>

namespace metrale::bench {

namespace {

bool cpu_time = false;

// Register-only loops: 12 independent accumulators, no memory traffic; operations per
// instruction: vdpbf16ps zmm 64 (32 bf16 pairs, multiply and add), vpdpbusd zmm 128 (64 u8 x s8
// products and their sums), vfmadd zmm 32, vfmadd ymm 16.
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
__attribute__((target("avx512f,avx512vnni"))) double int8_dot_loop(uint64_t iters) {
  __m512i acc[12];
  for (auto& a : acc) a = _mm512_setzero_si512();
  __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(1);
  for (uint64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_dpbusd_epi32(a, x, y);
    __asm__ volatile("" : "+v"(x), "+v"(y));
  }
  __m512i sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_epi32(sum, acc[i]);
  alignas(64) int32_t out[16];
  _mm512_store_si512(out, sum);
  return static_cast<double>(out[0]) * 0 + 128.0 * 12 * static_cast<double>(iters);
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

}  // namespace

void use_cpu_time(bool on) { cpu_time = on; }

double clock_now() {
  if (!cpu_time) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double seconds_since(double start, unsigned threads) {
  const double s = clock_now() - start;
  return cpu_time ? s / threads : s;
}

namespace {

// Giga-operations per second of `loop` on `threads` threads at once, best of 3.
double run_peak(unsigned threads, double (*loop)(uint64_t)) {
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    std::vector<double> ops(threads, 0);
    const double start = clock_now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back([&, t] { ops[t] = loop(kPeakIters); });
    for (auto& th : pool) th.join();
    const double s = seconds_since(start, threads);
    double total = 0;
    for (double v : ops) total += v;
    best = std::max(best, total / s / 1e9);
  }
  return best;
}

}  // namespace

std::vector<unsigned> denominator_counts(const std::vector<unsigned>& requested) {
  std::vector<unsigned> counts;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned t = 1; t < hw; t *= 2) counts.push_back(t);
  counts.push_back(hw);
  counts.insert(counts.end(), requested.begin(), requested.end());
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

namespace {

// Words [begin, end) summed as one stream, 4 independent accumulators (the loop the compiler
// vectorises): what the hardware prefetcher alone draws from memory.
uint64_t sum_one_stream(const uint64_t* buffer, size_t begin, size_t end) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = begin;
  for (; i + 4 <= end; i += 4) {
    a += buffer[i];
    b += buffer[i + 1];
    c += buffer[i + 2];
    d += buffer[i + 3];
  }
  for (; i < end; ++i) a += buffer[i];
  return a + b + c + d;
}

// The same words as 8 interleaved streams, each prefetched 2 KiB ahead into L2, the way the decode
// kernels read their panels: more misses in flight than one stream gets, so the denominator is
// what memory gives a reader that tries as hard as the kernels do.
uint64_t sum_prefetched_streams(const uint64_t* buffer, size_t begin, size_t end) {
  constexpr size_t kStreams = 8, kLineWords = 8, kAheadWords = 2048 / 8;
  const size_t lines = (end - begin) / kLineWords, per_stream = lines / kStreams * kLineWords;
  uint64_t acc[kStreams] = {};
  for (size_t w = 0; w < per_stream; w += kLineWords) {
    for (size_t s = 0; s < kStreams; ++s) {
      const uint64_t* line = buffer + begin + s * per_stream + w;
      __builtin_prefetch(line + kAheadWords, 0, 2);
      for (size_t j = 0; j < kLineWords; ++j) acc[s] += line[j];
    }
  }
  uint64_t total = sum_one_stream(buffer, begin + kStreams * per_stream, end);
  for (uint64_t v : acc) total += v;
  return total;
}

}  // namespace

// Per thread count, the better of the two readers above over the buffer, best of `reps` each.
std::vector<BandwidthPoint> measure_read_bandwidth(size_t bytes, unsigned reps, const std::vector<unsigned>& counts,
                                                   uint64_t& sink) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  const size_t words = rounded / 8;
  std::unique_ptr<uint64_t, decltype(&std::free)> memory(static_cast<uint64_t*>(std::aligned_alloc(kHugePage, rounded)),
                                                         &std::free);
  if (!memory) throw std::runtime_error("cannot allocate the bandwidth buffer");
#if defined(MADV_HUGEPAGE)
  ::madvise(memory.get(), rounded, MADV_HUGEPAGE);
#endif
  uint64_t* const buffer = memory.get();
  for (size_t i = 0; i < words; ++i) buffer[i] = i * 0x9e3779b97f4a7c15ull;  // touch every page first
  std::vector<BandwidthPoint> out;
  for (unsigned threads : counts) {
    double best = 0;
    for (unsigned r = 0; r < 2 * reps; ++r) {  // even: one stream, odd: prefetched streams
      std::vector<uint64_t> sums(threads, 0);
      const double start = clock_now();
      std::vector<std::thread> pool;
      for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          const size_t begin = words * t / threads, end = words * (t + 1) / threads;
          sums[t] = r % 2 ? sum_prefetched_streams(buffer, begin, end) : sum_one_stream(buffer, begin, end);
        });
      }
      for (auto& th : pool) th.join();
      const double s = seconds_since(start, threads);
      for (uint64_t v : sums) sink += v;
      best = std::max(best, static_cast<double>(words * 8) / s / 1e9);
    }
    out.push_back({threads, best, best, 0});
  }
  return out;
}

void remeasure_read_bandwidth(std::vector<BandwidthPoint>& points, size_t bytes, unsigned reps, uint64_t& sink) {
  std::vector<unsigned> counts;
  for (const auto& p : points) counts.push_back(p.threads);
  const auto again = measure_read_bandwidth(bytes, reps, counts, sink);
  for (size_t i = 0; i < points.size(); ++i) {
    points[i].at_start = points[i].gb_per_s;
    points[i].at_end = again[i].gb_per_s;
    points[i].gb_per_s = std::max(points[i].gb_per_s, again[i].gb_per_s);
  }
}

std::vector<PeakPoint> measure_peaks(const std::vector<unsigned>& counts) {
  std::vector<PeakPoint> out;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool bf16 = __builtin_cpu_supports("avx512bf16");
  const bool vnni = __builtin_cpu_supports("avx512vnni");
  const bool f512 = __builtin_cpu_supports("avx512f");
  const bool f256 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  for (unsigned threads : counts)
    out.push_back({threads, bf16 ? run_peak(threads, &bf16_dot_loop) : 0.0,
                   f512 ? run_peak(threads, &fma512_loop) : f256 ? run_peak(threads, &fma256_loop) : 0.0,
                   vnni ? run_peak(threads, &int8_dot_loop) : 0.0});
#else
  for (unsigned threads : counts) out.push_back({threads, 0.0, 0.0, 0.0});
#endif
  return out;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

unsigned affinity_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return static_cast<unsigned>(CPU_COUNT(&set));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string threads_label(unsigned threads) { return std::to_string(threads) + (threads == 1 ? " thread" : " threads"); }

CacheEvictor::CacheEvictor(size_t bytes) : words_(bytes / 8), buffer_(words_ ? new uint64_t[words_] : nullptr) {
  for (size_t i = 0; i < words_; ++i) buffer_[i] = i;
}

void CacheEvictor::evict(unsigned threads) {
  threads = std::max(1u, threads);
  std::vector<uint64_t> sums(threads, 0);
  const size_t lines = (words_ + 7) / 8;
  const auto read_share = [&](unsigned t) {
    const size_t begin = lines * t / threads * 8, end = std::min(words_, lines * (t + 1) / threads * 8);
    uint64_t sum = 0;
    for (size_t i = begin; i < end; i += 8) sum += buffer_[i];  // one word per cache line
    sums[t] = sum;
  };
  std::vector<std::thread> others;
  for (unsigned t = 1; t < threads; ++t) others.emplace_back(read_share, t);
  read_share(0);
  for (auto& th : others) th.join();
  for (uint64_t v : sums) sink_ += v;
}

std::shared_ptr<Backend> backend_on_threads(unsigned threads, const std::string& name) {
  // Levers are read at discovery and cached: the guard resets the cache both ways and puts the
  // user's value back.
  const testing::EnvGuard lever{{"METRALE_CPU_THREADS", std::to_string(threads)}};
  Registry registry = Registry::discover();
  return registry.select(name.empty() ? std::nullopt : std::optional(name));
}

namespace {

std::string first_line(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

// "32768K", "1M" (sysfs cache size) in bytes; 0 when it does not parse.
size_t cache_size_bytes(const std::string& text) {
  size_t value = 0, i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') value = value * 10 + static_cast<size_t>(text[i++] - '0');
  if (i == 0) return 0;
  const char unit = i < text.size() ? text[i] : ' ';
  return unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : unit == 'G' ? value << 30 : value;
}

}  // namespace

std::optional<LastLevelCache> last_level_cache(const std::string& sysfs_cpu_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Highest level -> (shared_cpu_list -> size): each instance once, whichever CPU lists it.
  std::map<uint32_t, std::map<std::string, size_t>> levels;
  for (const auto& cpu : fs::directory_iterator(sysfs_cpu_dir, ec)) {
    const std::string name = cpu.path().filename().string();
    if (name.size() < 4 || name.rfind("cpu", 0) != 0 || name.find_first_not_of("0123456789", 3) != std::string::npos) continue;
    for (const auto& index : fs::directory_iterator(cpu.path() / "cache", ec)) {
      const std::string type = first_line(index.path() / "type");
      if (type != "Unified" && type != "Data") continue;
      const std::string level = first_line(index.path() / "level");
      const size_t bytes = cache_size_bytes(first_line(index.path() / "size"));
      if (level.empty() || level.find_first_not_of("0123456789") != std::string::npos || bytes == 0) continue;
      levels[static_cast<uint32_t>(std::stoul(level))][first_line(index.path() / "shared_cpu_list")] = bytes;
    }
  }
  if (levels.empty()) return std::nullopt;
  const auto& [level, instances] = *levels.rbegin();
  LastLevelCache llc;
  llc.level = level;
  llc.instances = static_cast<uint32_t>(instances.size());
  for (const auto& [cpus, bytes] : instances) llc.bytes += bytes;
  return llc;
}

std::string eviction_note(size_t evict_mb, const std::optional<LastLevelCache>& llc) {
  if (!llc) return "last-level cache: not described by sysfs; eviction not checked against it";
  const size_t mb = (llc->bytes + (size_t{1} << 20) - 1) >> 20;
  std::string note = "last-level cache: L" + std::to_string(llc->level) + ", " + std::to_string(mb) + " MB in " +
                     std::to_string(llc->instances) + (llc->instances == 1 ? " instance" : " instances") + " (sysfs)";
  if (evict_mb != 0 && evict_mb < 2 * mb) {
    note += "; WARNING: --evict-mb " + std::to_string(evict_mb) + " is under twice it, so evicted rows may still read cached weights";
  }
  return note;
}

std::string peak_scaling_note(const std::vector<PeakPoint>& peaks) {
  std::string note;
  const PeakPoint* one = nullptr;
  for (const auto& p : peaks)
    if (p.threads == 1) one = &p;
  if (one == nullptr) return note;
  const auto check = [&](const char* name, unsigned threads, double got, double single) {
    if (single <= 0 || got >= 0.75 * threads * single) return;
    char line[256];
    std::snprintf(line, sizeof line,
                  "WARNING: the %u-thread %s peak (%.1f) is %.2f x the 1-thread one (%.1f), not about %u x: the CPUs "
                  "were shared while it was measured, so %u-thread ratios against it read high\n",
                  threads, name, got, got / single, single, threads, threads);
    note += line;
  };
  for (const auto& p : peaks) {
    if (p.threads < 2) continue;
    check("bf16 dot", p.threads, p.bf16_dot_gflop_per_s, one->bf16_dot_gflop_per_s);
    check("int8 dot", p.threads, p.int8_dot_gop_per_s, one->int8_dot_gop_per_s);
  }
  return note;
}

size_t default_evict_mb(const std::optional<LastLevelCache>& llc, size_t floor_mb) {
  if (!llc) return floor_mb;
  return std::max(floor_mb, (2 * llc->bytes + (size_t{1} << 20) - 1) >> 20);
}

}  // namespace metrale::bench
