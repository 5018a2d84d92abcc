// SPDX-License-Identifier: MIT OR Apache-2.0
// metrale-bench-kernels: the quantized GEMM families kernel by kernel on the qwen3-32b FFN
// shapes (gate_up n = 51200, k = 5120; down n = 5120, k = 25600), against what the machine can
// do in the same run: for each thread count of --threads (the backend selected afresh with
// METRALE_CPU_THREADS), decode (m = 1: the GEMV) in weight bytes per second as a share of the
// read bandwidth, and prefill (m of --m: the tile GEMM) in operations per second as a share of
// the bf16 dot peak (bf16 activations) or of the int8 dot peak (int8 activations), the int8
// families also against the symmetric W4A16 prefill rate. Each pass covers both projections
// and what a layer launches with them: act-order adds quant/gather_k, the int8 families
// quant/quantize_int8. Not a test: numbers, not verdicts. Progress on stderr.
#include "bench_machine.hpp"

#include <metrale/log.hpp>
#include <metrale/text_table.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <numeric>
#include <random>
#include <vector>

namespace {

using namespace metrale;
using namespace metrale::bench;

// A family as the bench runs it; group 128 throughout (the targets' case).
struct Family {
  std::string name;      // the row's label
  std::string module;
  std::string gemv, gemm, repack;
  uint32_t bits;         // 4 or 8
  bool zeros, int8, f16_scales, act_order;
};

const std::vector<Family> kFamilies{
    {"w4a16", "w4a16", "w4a16_gemv", "w4a16_gemm_t", "w4a16_repack", 4, false, false, true, false},
    {"w4a16_zp", "w4a16_zp", "w4a16_zp_gemv", "w4a16_zp_gemm", "w4a16_zp_repack", 4, true, false, false, false},
    {"act-order", "w4a16_zp", "w4a16_zp_gemv", "w4a16_zp_gemm", "w4a16_zp_repack", 4, true, false, false, true},
    {"w8a16", "w8a16", "w8a16_gemv", "w8a16_gemm", "w8a16_repack", 8, true, false, false, false},
    {"fp8", "fp8", "fp8_gemv", "fp8_gemm", "fp8_repack", 8, false, false, false, false},
    {"w4a8", "w4a8", "w4a8_gemv", "w4a8_gemm", "w4a8_repack", 4, true, true, false, false},
    {"w8a8", "w8a8", "w8a8_gemv", "w8a8_gemm", "w8a8_repack", 8, true, true, false, false},
};
constexpr uint32_t kGroup = 128;

struct Shape {
  uint32_t n, k;
};
constexpr Shape kShapes[] = {{51200, 5120}, {5120, 25600}};  // qwen3-32b gate_up, down

std::vector<uint8_t> random_bytes(size_t count, uint64_t seed) {
  std::vector<uint8_t> out(count);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < count; i += 8) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    for (size_t b = 0; b < 8 && i + b < count; ++b) out[i + b] = static_cast<uint8_t>(s >> (8 * b));
  }
  return out;
}

template <class T>
DevicePtr upload(Backend& b, const std::vector<T>& host) {
  const DevicePtr p = b.alloc(host.size() * sizeof(T));
  b.copy_to_device(p, host.data(), host.size() * sizeof(T));
  return p;
}

// One projection's weights in the family's layout, repacked on the device.
struct Projection {
  Shape shape;
  DevicePtr codes, scales, zeros, perm;
  double bytes = 0;  // what a pass reads
};

Projection load(Backend& b, const Family& f, Shape s, uint64_t seed) {
  Projection p{s, {}, {}, {}, {}, 0};
  const size_t groups = size_t{s.n} * (s.k / kGroup);
  std::vector<uint8_t> codes = random_bytes(size_t{s.n} * s.k * f.bits / 8, seed);
  if (f.module == "fp8")
    for (auto& c : codes) c = (c & 0x7f) == 0x7f ? c ^ 1 : c;  // no NaN: a row of NaN is not a workload
  std::vector<uint8_t> scales(groups * (f.f16_scales ? 2 : 4));
  for (size_t g = 0; g < groups; ++g) {
    if (f.f16_scales) {
      scales[2 * g] = 0x1f, scales[2 * g + 1] = 0x20;  // f16 ~0.0089
    } else {
      const float v = 0.01f * static_cast<float>(1 + g % 7);
      std::memcpy(&scales[4 * g], &v, 4);
    }
  }
  const DevicePtr codes_in = upload(b, codes), scales_in = upload(b, scales);
  p.codes = b.alloc(codes.size());
  p.scales = b.alloc(scales.size());
  const LaunchShape grid{{(s.n + 63) / 64, 1, 1}, {128, 1, 1}};
  const KernelHandle repack = b.kernel(f.module, f.repack);
  if (f.zeros) {
    const DevicePtr zeros_in = upload(b, std::vector<uint8_t>(groups, f.bits == 4 ? 8 : 128));
    p.zeros = b.alloc(groups);
    b.launch(repack, grid, codes_in, scales_in, zeros_in, p.codes, p.scales, p.zeros, s.n, s.k, kGroup, 1u);
    b.free(zeros_in);
  } else {
    b.launch(repack, grid, codes_in, scales_in, p.codes, p.scales, s.n, s.k, 1u);
  }
  b.free(codes_in);
  b.free(scales_in);
  p.bytes = static_cast<double>(codes.size() + scales.size() + (f.zeros ? groups : 0));
  if (f.act_order) {
    std::vector<int32_t> perm(s.k);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
    p.perm = upload(b, perm);
    p.bytes += static_cast<double>(perm.size() * 4);
  }
  return p;
}

void unload(Backend& b, const Projection& p) {
  for (DevicePtr d : {p.codes, p.scales, p.zeros, p.perm})
    if (d) b.free(d);
}

// Activations of one pass and the scratch a layer would have: x, gathered x, xq, xscale, y.
struct Buffers {
  DevicePtr x, gathered, xq, xscale, y, offsets;
};

// One projection's launches for m rows: what a layer runs (gather, quantize, GEMM).
void project(Backend& b, const Family& f, const Projection& p, const Buffers& io, uint32_t m) {
  const bool gemv = m <= 8;
  // W4A16's m = 1 GEMV takes one row only; its batched twin takes up to 8.
  const std::string gemv_name = f.module == "w4a16" && m > 1 ? "w4a16_gemv_b8" : f.gemv;
  const KernelHandle gemm = b.kernel(f.module, gemv ? gemv_name : f.gemm);
  const LaunchShape shape{{gemv ? (p.shape.n + 63) / 64 : (p.shape.n + 127) / 128, gemv ? 1 : (m + 63) / 64, 1},
                          {128, 1, 1}};
  DevicePtr x = io.x;
  if (f.act_order) {
    b.launch(b.kernel("quant", "gather_k"), LaunchShape{{m, 1, 1}, {128, 1, 1}}, io.x, p.perm, io.offsets,
             io.gathered, p.shape.k, 1u);
    x = io.gathered;
  }
  if (f.int8) {
    b.launch(b.kernel("quant", "quantize_int8"), LaunchShape{{m, 1, 1}, {256, 1, 1}}, x, io.xq, io.xscale, m,
             p.shape.k);
    b.launch(gemm, shape, io.xq, io.xscale, p.codes, p.scales, p.zeros, io.y, m, p.shape.n, p.shape.k, kGroup);
  } else if (f.zeros) {
    b.launch(gemm, shape, x, p.codes, p.scales, p.zeros, io.y, m, p.shape.n, p.shape.k, kGroup);
  } else {
    b.launch(gemm, shape, x, p.codes, p.scales, io.y, m, p.shape.n, p.shape.k);
  }
}

struct Row {
  std::string family, path, kernels;
  uint32_t m = 0;
  double median_s = 0, bytes = 0, ops = 0;
  double of_bandwidth = 0, of_peak = 0, vs_w4a16 = 0;
  bool int8 = false;
};

bool g_best = false;  // --best: the fastest pass instead of the median

// Median (or fastest) seconds of `repeat` passes over both projections, caches evicted before each.
double time_passes(Backend& b, const Family& f, const std::vector<Projection>& projections, const Buffers& io,
                   uint32_t m, uint32_t repeat, CacheEvictor& evictor) {
  for (const auto& p : projections) project(b, f, p, io, m);  // warm-up
  b.synchronize();
  std::vector<double> times;
  for (uint32_t i = 0; i < repeat; ++i) {
    evictor.evict(b.compute_units());
    const double start = clock_now();
    for (const auto& p : projections) project(b, f, p, io, m);
    b.synchronize();
    times.push_back(seconds_since(start, b.compute_units()));
  }
  return g_best ? *std::min_element(times.begin(), times.end()) : median(times);
}

Buffers make_buffers(Backend& b, uint32_t m) {
  uint32_t k = 0, n = 0;
  for (const Shape& s : kShapes) k = std::max(k, s.k), n = std::max(n, s.n);
  std::vector<uint16_t> x(size_t{m} * k);
  std::mt19937_64 rng(7);
  for (auto& v : x) v = static_cast<uint16_t>(0x3c00 + rng() % 0x400 + ((rng() & 1) << 15));  // |x| in [2^-7, 2^-6)
  return {upload(b, x), b.alloc(x.size() * 2), b.alloc(x.size()), b.alloc(size_t{m} * 4), b.alloc(size_t{m} * n * 2),
          upload(b, std::vector<int32_t>{0, static_cast<int32_t>(m)})};
}

void free_buffers(Backend& b, const Buffers& io) {
  for (DevicePtr d : {io.x, io.gathered, io.xq, io.xscale, io.y, io.offsets}) b.free(d);
}

// Every family's decode and prefill rows on one backend.
std::vector<Row> measure(Backend& b, const std::vector<Family>& families, uint32_t prefill_m, uint32_t repeat,
                         CacheEvictor& evictor) {
  std::vector<Row> rows;
  const Buffers decode_io = make_buffers(b, 1), prefill_io = make_buffers(b, prefill_m);
  for (const Family& f : families) {
    std::fprintf(stderr, "%s (%s): loading weights...\n", f.name.c_str(), threads_label(b.compute_units()).c_str());
    std::vector<Projection> projections;
    uint64_t seed = 1;
    for (const Shape& s : kShapes) projections.push_back(load(b, f, s, seed++));
    for (const uint32_t m : {1u, prefill_m}) {
      std::fprintf(stderr, "%s: m = %u...\n", f.name.c_str(), m);
      Row r;
      r.family = f.name;
      r.path = m == 1 ? "decode" : m <= 8 ? "batched" : "prefill";
      r.m = m;
      r.int8 = f.int8;
      r.kernels = std::string(f.act_order ? "gather_k + " : f.int8 ? "quantize_int8 + " : "") +
                  (m == 1 ? f.gemv : m <= 8 ? (f.module == "w4a16" ? "w4a16_gemv_b8" : f.gemv) : f.gemm);
      r.median_s = time_passes(b, f, projections, m == 1 ? decode_io : prefill_io, m, m == 1 ? 3 * repeat : repeat,
                               evictor);
      for (const auto& p : projections) {
        r.bytes += p.bytes;
        r.ops += 2.0 * m * p.shape.n * p.shape.k;
      }
      rows.push_back(r);
    }
    for (const auto& p : projections) unload(b, p);
  }
  free_buffers(b, decode_io);
  free_buffers(b, prefill_io);
  return rows;
}

void set_ratios(std::vector<Row>& rows, double bw, double bf16, double int8) {
  double w4a16_prefill = 0;
  for (const Row& r : rows)
    if (r.family == "w4a16" && r.path == "prefill") w4a16_prefill = r.ops / r.median_s;
  for (Row& r : rows) {
    r.of_bandwidth = r.bytes / r.median_s / 1e9 / bw;
    const double peak = r.int8 ? int8 : bf16;
    r.of_peak = peak > 0 ? r.ops / r.median_s / 1e9 / peak : 0;
    r.vs_w4a16 = r.path == "prefill" && w4a16_prefill > 0 ? r.ops / r.median_s / w4a16_prefill : 0;
  }
}

std::string fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

void print_rows(const std::vector<Row>& rows, unsigned threads, double bw, double bf16, double int8) {
  std::cout << "\n== " << threads_label(threads) << ": read bandwidth " << fixed(bw, 2) << " GB/s, bf16 dot peak "
            << fixed(bf16, 1) << " GFLOP/s, int8 dot peak " << fixed(int8, 1) << " GOP/s ==\n";
  std::vector<std::vector<std::string>> table;
  for (const Row& r : rows)
    table.push_back({r.family, r.path, std::to_string(r.m), fixed(r.median_s * 1e3, 2), fixed(r.bytes / 1e6, 1),
                     fixed(r.bytes / r.median_s / 1e9, 2), fixed(r.of_bandwidth, 3),
                     fixed(r.ops / r.median_s / 1e9, 1), fixed(r.of_peak, 3) + (r.int8 ? " (int8)" : " (bf16)"),
                     r.vs_w4a16 > 0 ? fixed(r.vs_w4a16, 2) : "-", r.kernels});
  std::cout << render_table({"family", "path", "m", "median ms", "weights MB", "GB/s", "of read bw", "G(FL)OP/s",
                             "of dot peak", "x w4a16", "kernels"},
                            table);
}

}  // namespace

// The denominators of every ratio, per thread count: read bandwidth (both measurements) and peaks.
template <typename Bandwidth, typename Peaks>
void print_denominators(const Bandwidth& bandwidth, const Peaks& peaks) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : bandwidth)
    rows.push_back({std::to_string(p.threads), fixed(p.at_start, 2), fixed(p.at_end, 2), fixed(p.gb_per_s, 2),
                    fixed(at_threads(peaks, p.threads, [](const PeakPoint& q) { return q.bf16_dot_gflop_per_s; }), 1),
                    fixed(at_threads(peaks, p.threads, [](const PeakPoint& q) { return q.int8_dot_gop_per_s; }), 1)});
  std::cout << render_table({"threads", "read GB/s at start", "at end", "used (the better)", "bf16 dot GFLOP/s",
                             "int8 dot GOP/s"},
                            rows);
}

int main(int argc, char** argv) {
  CLI::App app{"metrale-bench-kernels: the quantized GEMM families against this machine's bandwidth and dot peaks"};
  std::string backend_name = "cpu";
  std::vector<unsigned> thread_list;
  std::vector<std::string> names;
  uint32_t prefill_m = 128, repeat = 3;
  const std::optional<LastLevelCache> llc = last_level_cache();
  size_t bandwidth_mb = 512, evict_mb = default_evict_mb(llc);
  bool cpu_time = false;
  app.add_option("--backend", backend_name, "Backend")->capture_default_str();
  app.add_option("--threads", thread_list, "Thread counts (default: 1 and the CPUs in the affinity mask)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 1024u));
  app.add_option("--families", names, "Families (default: all)")->delimiter(',');
  app.add_option("--m", prefill_m, "Rows of the second pass (2..8: the GEMVs, batched; more: the tile GEMMs)")
      ->check(CLI::Range(2u, 4096u))
      ->capture_default_str();
  app.add_option("--repeat", repeat, "Timed prefill passes per row, median (decode: three times as many)")
      ->capture_default_str();
  app.add_option("--bandwidth-mb", bandwidth_mb, "Buffer size of the bandwidth measurement")->capture_default_str();
  app.add_option("--evict-mb", evict_mb,
                 "Buffer read before each timed pass (0: caches warm; default: twice the last-level cache, at least 256)")
      ->capture_default_str();
  app.add_flag("--cpu-time", cpu_time,
               "Time with the process's CPU time over the threads at work instead of wall time (an oversubscribed "
               "machine stretches the latter)");
  app.add_flag("--best", g_best, "The fastest pass instead of the median (on a shared machine the slow passes are "
                                 "other processes' doing)");
  CLI11_PARSE(app, argc, argv);
  use_cpu_time(cpu_time);
  repeat = std::max(repeat, 1u);
  if (thread_list.empty()) thread_list = {1, affinity_cpus()};
  std::sort(thread_list.begin(), thread_list.end());
  thread_list.erase(std::unique(thread_list.begin(), thread_list.end()), thread_list.end());
  std::vector<Family> families;
  for (const Family& f : kFamilies)
    if (names.empty() || std::find(names.begin(), names.end(), f.name) != names.end()) families.push_back(f);
  if (families.empty()) {
    std::fprintf(stderr, "metrale-bench-kernels: no family matches --families\n");
    return 1;
  }
  try {
    configure_logging();
    const auto counts = denominator_counts(thread_list);
    uint64_t sink = 0;
    std::fprintf(stderr, "measuring read bandwidth over %zu MB...\n", bandwidth_mb);
    auto bandwidth = measure_read_bandwidth(bandwidth_mb << 20, 5, counts, sink);
    std::fprintf(stderr, "measuring bf16 dot, f32 FMA and int8 dot peaks...\n");
    const auto peaks = measure_peaks(counts);
    CacheEvictor evictor(evict_mb << 20);
    std::vector<std::pair<unsigned, std::vector<Row>>> runs;
    std::string target;
    for (unsigned requested : thread_list) {
      auto backend = backend_on_threads(requested, backend_name);
      target = backend->target();
      runs.emplace_back(backend->compute_units(), measure(*backend, families, prefill_m, repeat, evictor));
    }
    std::fprintf(stderr, "measuring read bandwidth again...\n");
    remeasure_read_bandwidth(bandwidth, bandwidth_mb << 20, 5, sink);

    std::cout << "backend " << backend_name << " (" << target << "); group " << kGroup << "; qwen3-32b gate_up (n 51200, k 5120) + down (n 5120, k 25600) per pass\n\n";
    print_denominators(bandwidth, peaks);
    std::cout << (cpu_time ? "times: CPU time over the threads at work\n" : "times: wall clock\n")
              << "passes: decode " << (g_best ? "fastest" : "median") << " of " << 3 * repeat << ", prefill of " << repeat << ", caches evicted before each ("
              << evict_mb << " MB read; parity " << (sink + evictor.sink()) % 2 << ")\n"
              << eviction_note(evict_mb, llc) << "\n";
    for (auto& [threads, rows] : runs) {
      const double bw = at_threads(bandwidth, threads, [](const BandwidthPoint& p) { return p.gb_per_s; });
      const double bf16 = at_threads(peaks, threads, [](const PeakPoint& p) { return p.bf16_dot_gflop_per_s; });
      const double int8 = at_threads(peaks, threads, [](const PeakPoint& p) { return p.int8_dot_gop_per_s; });
      set_ratios(rows, bw, bf16, int8);
      print_rows(rows, threads, bw, bf16, int8);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "metrale-bench-kernels: %s\n", e.what());
    return 1;
  }
}
