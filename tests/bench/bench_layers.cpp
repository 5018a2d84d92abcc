// SPDX-License-Identifier: MIT OR Apache-2.0
// metrale-bench-layers: the machine's read bandwidth and dot-product peaks (bf16 and int8),
// measured in this run per thread count; then, for each thread count of --threads (the CPU
// backend selected afresh with METRALE_CPU_THREADS set to it), each preset's FFN rate per weight
// tier (--variants: W4A16, asymmetric and act-order int4, W8A16, FP8, W4A8, W8A8, bf16; bench_rows.hpp)
// at each m of --m the tier covers, in GB/s of weights and GFLOP/s, as fractions of the bandwidth,
// of the dot peak of its activations and of the roofline; the scaling in m and in threads; the
// launch overhead of a one-block kernel through the runtime against the plugin's raw entry point
// and the cost of a warm try_kernel hit; and the worst figure per performance target
// (docs/perf.md; bench_targets.hpp); the attention kernels (attn-decode: cache bytes per second
// against the read bandwidth at each context of --attn-contexts, for each count of --attn-seqs;
// attn-prefill: causal FLOP per second against the bf16 dot peak at each m of --attn-m).
// All ratios of the same run. Not a test: numbers, not
// verdicts. Progress on stderr; --json puts one JSON document on stdout.
#include "bench_machine.hpp"
#include "bench_report.hpp"
#include "bench_rows.hpp"
#include "bench_targets.hpp"
#include "core/device_buffer.hpp"

#include <layers/core/levers.hpp>

#include <metrale/log.hpp>
#include <metrale/registry.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace metrale;
using namespace metrale::bench;
using namespace metrale::layers;
using Clock = std::chrono::steady_clock;

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

struct Options {
  std::string backend_name;
  std::vector<std::string> presets{"qwen3-32b", "qwen3-30b-a3b"};
  std::vector<std::string> variants = variant_names();
  std::vector<uint32_t> m_list{1, 2, 4, 8, 16, 64, 256, 512};
  std::vector<unsigned> threads;
  AttentionRequest attention;
  DeltaNetRequest deltanet;
  ModelRowsRequest model;
  uint32_t repeat = 3;
  uint32_t launches = 2000;
  size_t bandwidth_mb = 1024;
  std::optional<LastLevelCache> llc = last_level_cache();
  size_t evict_mb = default_evict_mb(llc);  // twice the last-level cache, at least 256
  bool json = false;
  bool cpu_time = false;
  bool bandwidth_only = false;
};

void add_options(CLI::App& app, Options& o) {
  app.add_option("--backend", o.backend_name, "Backend (default: METRALE_BACKEND or the highest priority)");
  app.add_option("--presets", o.presets, "Presets to measure")->delimiter(',')->capture_default_str();
  app.add_option("--variants", o.variants,
                 "Weight tiers to measure, comma-separated: w4a16 (every m), w4-zp and w4-zp-act (asymmetric "
                 "group-128 int4, the latter with a K permutation) and ct-act-order (symmetric, with a K "
                 "permutation, as compressed-tensors' act-order loads; m = 1 and m >= 64), w8a16, fp8 and "
                 "fp8-block (FP8 weights, E4M3 activations scaled per 128 columns; m = 1), w4a8 and w8a8 "
                 "(int8 activations; m >= 64), bf16; attn-decode and attn-prefill (the attention kernels, "
                 "--attn-contexts, --attn-seqs, --attn-m); deltanet-prefill and deltanet-decode (the Gated DeltaNet on "
                 "Qwen3.5-0.8B's and a Qwen3.5-27B layer's shapes: --deltanet-m, --deltanet-seqs); model (a decoder preset end to end: --model-preset, "
                 "--model-prompts, --model-seqs)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--attn-contexts", o.attention.contexts, "attn-decode: tokens in each sequence's cache, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(uint32_t{1}, uint32_t{1} << 20))
      ->capture_default_str();
  app.add_option("--attn-seqs", o.attention.seqs, "attn-decode: sequences per decode step, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(uint32_t{1}, uint32_t{256}))
      ->capture_default_str();
  app.add_option("--attn-m", o.attention.prefill_m, "attn-prefill: query rows of the chunk (no past), comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(uint32_t{1}, uint32_t{1} << 20))
      ->capture_default_str();
  app.add_option("--deltanet-m", o.deltanet.prefill_m, "deltanet-prefill: tokens of the one sequence, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(uint32_t{1}, uint32_t{1} << 20))
      ->capture_default_str();
  app.add_option("--deltanet-seqs", o.deltanet.seqs, "deltanet-decode: sequences per decode step, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(uint32_t{1}, uint32_t{256}))
      ->capture_default_str();
  app.add_option("--model-preset", o.model.preset, "model: the decoder preset (qwen3-0.6b, qwen3-1.7b, tiny-qwen3)")
      ->capture_default_str();
  app.add_option("--model-prompts", o.model.prompts, "model: prompt lengths, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(uint32_t{1}, uint32_t{1} << 16))
      ->capture_default_str();
  app.add_option("--model-seqs", o.model.seqs, "model: sequences decoded together, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(uint32_t{1}, uint32_t{256}))
      ->capture_default_str();
  app.add_option("--m", o.m_list, "Rows (tokens) per pass to measure, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(uint32_t{1}, UINT32_MAX))
      ->capture_default_str();
  app.add_option("--threads", o.threads,
                 "CPU backend thread counts to measure, comma-separated (default: 1 and the CPUs in the affinity mask)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 1024u));  // the CPU backend's limit
  app.add_option("--launches", o.launches, "Launches per launch-overhead sample")->capture_default_str();
  app.add_option("--repeat", o.repeat, "Timed passes per rate (median)")->capture_default_str();
  app.add_option("--bandwidth-mb", o.bandwidth_mb, "Buffer size of the bandwidth measurement")->capture_default_str();
  app.add_option("--evict-mb", o.evict_mb,
                 "Buffer read before each timed pass to push the weights out of the caches (0: keep them warm; "
                 "default: twice the last-level cache sysfs reports, at least 256)")
      ->capture_default_str();
  app.add_flag("--json", o.json, "JSON on stdout");
  app.add_flag("--bandwidth-only", o.bandwidth_only,
               "Measure only the read bandwidth (the denominator of the rows) on --threads and print it: "
               "what tools/bench-peer divides its bytes per token by");
  app.add_flag("--cpu-time", o.cpu_time,
               "Time the passes and the denominators with the process's CPU time over the threads at work instead of "
               "wall time (an oversubscribed machine stretches the latter); launch costs stay wall time");
}

// Ascending and distinct: the scaling tables compare neighbours, the thread scaling the first.
template <class T>
void sort_unique(std::vector<T>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

Denominators denominators_at(const Report& rep, unsigned threads) {
  Denominators d;
  d.read_bw = at_threads(rep.bandwidth, threads, [](const BandwidthPoint& p) { return p.gb_per_s; });
  d.bf16_dot = at_threads(rep.peaks, threads, [](const PeakPoint& p) { return p.bf16_dot_gflop_per_s; });
  d.int8_dot = at_threads(rep.peaks, threads, [](const PeakPoint& p) { return p.int8_dot_gop_per_s; });
  d.tier_dot = tier_dot_of(rep.target, d.bf16_dot, at_threads(rep.peaks, threads, [](const PeakPoint& p) {
                             return p.fma_gflop_per_s;
                           }));
  return d;
}

// Each thread count selects the backend afresh: METRALE_CPU_THREADS is read at discovery.
void measure_runs(const Options& o, Report& rep, CacheEvictor& evictor) {
  RateRequest request{o.presets, select_variants(o.variants), o.m_list, o.repeat};
  AttentionRequest attention = o.attention;
  attention.rows = attention_rows(request.variants);
  attention.repeat = o.repeat;
  DeltaNetRequest deltanet = o.deltanet;
  deltanet.repeat = o.repeat;
  ModelRowsRequest model = o.model;
  for (const auto& v : request.variants) {
    model.enabled |= v.whole_model;
    deltanet.prefill |= v.deltanet == DeltaNetRows::prefill;
    deltanet.decode |= v.deltanet == DeltaNetRows::decode;
  }
  for (unsigned requested : o.threads) {
    auto backend = backend_on_threads(requested, o.backend_name);
    Backend& b = *backend;
    rep.backend = b.name();
    rep.target = b.target();
    rep.device = b.device_name();
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
    run.d = denominators_at(rep, run.threads);
    run.rates = measure_rates(b, request, run.threads, run.d, evictor);
    for (auto& r : measure_attention_rates(b, attention, run.threads, run.d, evictor)) run.rates.push_back(std::move(r));
    for (auto& r : measure_deltanet_rates(b, deltanet, run.threads, run.d, evictor)) run.rates.push_back(std::move(r));
    for (auto& r : measure_model_rates(b, model, run.threads, run.d)) run.rates.push_back(std::move(r));
    std::fprintf(stderr, "measuring launch overhead (%s)...\n", threads_label(run.threads).c_str());
    run.launch = measure_launch(b, o.launches);
    rep.runs.push_back(std::move(run));
    if (!cpu) break;
  }
}

Report measure(const Options& o) {
  Report rep;
  const std::vector<unsigned> counts = denominator_counts(o.threads);
  std::fprintf(stderr, "measuring read bandwidth over %zu MB...\n", o.bandwidth_mb);
  rep.bandwidth = measure_read_bandwidth(o.bandwidth_mb << 20, 5, counts, rep.sink);
  std::fprintf(stderr, "measuring bf16 dot, int8 dot and f32 FMA peaks...\n");
  rep.peaks = measure_peaks(counts);
  CacheEvictor evictor(o.evict_mb << 20);
  measure_runs(o, rep, evictor);
  // The bandwidth a shared machine gives swings from minute to minute: measure it again at the
  // end and hold every row to the better of the two, so no ratio flatters a quiet spell.
  std::fprintf(stderr, "measuring read bandwidth again...\n");
  remeasure_read_bandwidth(rep.bandwidth, o.bandwidth_mb << 20, 5, rep.sink);
  for (const auto& p : rep.bandwidth) rep.peak_bandwidth = std::max(rep.peak_bandwidth, p.gb_per_s);
  for (auto& run : rep.runs) {
    run.d = denominators_at(rep, run.threads);
    for (auto& r : run.rates) set_ratios(r, run.d);
    for (auto& t : targets_of(run)) rep.targets.push_back(std::move(t));
  }
  std::stable_sort(rep.targets.begin(), rep.targets.end(), [](const TargetRow& a, const TargetRow& b) {
    return a.target != b.target ? a.target < b.target : a.threads < b.threads;
  });
  rep.presets = o.presets;
  rep.variants = o.variants;
  rep.bandwidth_mb = o.bandwidth_mb;
  rep.evict_mb = o.evict_mb;
  rep.llc = o.llc;
  rep.repeat = o.repeat;
  rep.evictor_sink = evictor.sink();
  rep.cpu_time = o.cpu_time;
  return rep;
}

// --bandwidth-only: the read bandwidth of measure(), alone, on exactly the counts of --threads
// (tools/bench-peer measures it before and after its runs and keeps the better, as measure() does).
void print_bandwidth(const Options& o) {
  uint64_t sink = 0;
  std::fprintf(stderr, "measuring read bandwidth over %zu MB...\n", o.bandwidth_mb);
  const auto points = measure_read_bandwidth(o.bandwidth_mb << 20, 5, o.threads, sink);
  if (o.json) {
    nlohmann::json out{{"bandwidth_mb", o.bandwidth_mb}, {"sink", sink}, {"read_bandwidth", nlohmann::json::array()}};
    for (const auto& p : points) out["read_bandwidth"].push_back({{"threads", p.threads}, {"gb_per_s", p.gb_per_s}});
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  for (const auto& p : points) std::printf("read bandwidth, %u thread(s): %.2f GB/s\n", p.threads, p.gb_per_s);
  std::printf("(sink %llu)\n", static_cast<unsigned long long>(sink));
}

}  // namespace

int main(int argc, char** argv) {
  metrale::layers::register_levers();  // before any lever is read, as every program using the layers does
  CLI::App app{"metrale-bench-layers: FFN GEMV/GEMM rates against this machine's measured read bandwidth"};
  Options o;
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);
  use_cpu_time(o.cpu_time);
  o.repeat = std::max(o.repeat, 1u);
  o.launches = std::max(o.launches, 1u);
  sort_unique(o.m_list);
  if (o.threads.empty()) o.threads = {1, affinity_cpus()};
  sort_unique(o.threads);
  try {
    configure_logging();
    if (o.bandwidth_only) {
      print_bandwidth(o);
      return 0;
    }
    const Report rep = measure(o);
    if (o.json)
      print_json(rep);
    else
      print_text(rep);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "metrale-bench-layers: %s\n", e.what());
    return 1;
  }
}
