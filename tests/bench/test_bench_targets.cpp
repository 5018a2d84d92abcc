// SPDX-License-Identifier: MIT OR Apache-2.0
// The layer bench's row selection and target evaluation (bench_rows.hpp, bench_targets.hpp) on
// made-up rows: which m each weight tier covers, which rows each target takes, and the figures;
// the last-level cache read from a made-up sysfs tree and the eviction it sizes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "bench_machine.hpp"
#include "bench_rows.hpp"
#include "bench_targets.hpp"

#include <metrale/status.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace metrale::bench;

namespace {

Rate row(std::string variant, std::string ffn, uint32_t m, double seconds, const Denominators& d) {
  Rate r;
  r.preset = ffn == "moe" ? "qwen3-30b-a3b" : "qwen3-32b";
  r.variant = std::move(variant);
  r.ffn = std::move(ffn);
  r.m = m;
  r.threads = 2;
  r.int8_dot = r.variant == "w4a8" || r.variant == "w8a8";
  r.median_s = seconds;
  r.weight_bytes = 1e9;  // 1 GB/s per second of median
  r.flops = 1e9 * m;
  r.gb_per_s = r.weight_bytes / seconds / 1e9;
  r.gflop_per_s = r.flops / seconds / 1e9;
  set_ratios(r, d);
  return r;
}

const TargetRow& target(const std::vector<TargetRow>& all, int id) {
  for (const auto& t : all)
    if (t.target == id) return t;
  FAIL("no target " << id);
  return all.front();
}

}  // namespace

TEST_CASE("each weight tier covers its paths") {
  const auto v = select_variants(variant_names());
  REQUIRE(v.size() == 15);
  for (size_t i : {size_t{12}, size_t{13}}) {  // the DeltaNet rows: no FFN preset row either
    CHECK(v[i].deltanet != DeltaNetRows::none);
    CHECK_FALSE(v[i].covers(1, false));
  }
  CHECK(v[12].name == "deltanet-prefill");
  CHECK(v[13].name == "deltanet-decode");
  CHECK(v.back().name == "model");
  CHECK(v.back().whole_model);
  CHECK_FALSE(v.back().covers(1, false));  // no FFN preset row: measure_model_rates measures it
  const auto& zp = v[1];
  CHECK(zp.name == "w4-zp");
  CHECK_FALSE(zp.formats.symmetric);
  CHECK(zp.formats.group == 128);
  CHECK(v[2].formats.act_order);
  CHECK(zp.covers(1, false));
  CHECK_FALSE(zp.covers(8, false));
  CHECK(zp.covers(64, false));
  CHECK_FALSE(zp.covers(1, true));  // dense presets only
  CHECK(v[3].name == "ct-act-order");
  CHECK(v[3].formats.symmetric);
  CHECK(v[3].formats.act_order);
  CHECK(v[5].name == "fp8");
  CHECK(v[5].covers(1, true));
  CHECK_FALSE(v[5].covers(64, false));
  CHECK(v[6].name == "fp8-block");
  CHECK(v[6].activations == metrale::layers::ActivationQuant::fp8);
  CHECK(v[6].scaling.group128);
  CHECK(v[6].covers(1, true));
  CHECK(v[7].activations == metrale::layers::ActivationQuant::int8);
  CHECK_FALSE(v[7].covers(1, false));
  CHECK(v[9].name == "bf16");
  CHECK(v[9].formats.weights == metrale::layers::WeightFormat::bf16);
  CHECK(v[9].covers(1, true));
  CHECK(v[9].covers(64, false));
  // The attention row sets: no FFN preset covers them; attention_rows picks them out in order.
  CHECK(v[10].name == "attn-decode");
  CHECK(v[11].name == "attn-prefill");
  for (uint32_t m : {1u, 64u}) {
    CHECK_FALSE(v[10].covers(m, false));
    CHECK_FALSE(v[11].covers(m, true));
  }
  CHECK(attention_rows(v) == std::vector<AttentionRows>{AttentionRows::decode, AttentionRows::prefill});
  CHECK(attention_rows(select_variants({"w4a16", "attn-prefill"})) == std::vector<AttentionRows>{AttentionRows::prefill});
  CHECK(attention_rows(select_variants({"w4a16"})).empty());
  CHECK_THROWS_WITH_AS(select_variants({"w4a16", "w3a16"}),
                       "--variants: unknown variant 'w3a16' (known: w4a16, w4-zp, w4-zp-act, ct-act-order, w8a16, fp8, "
                       "fp8-block, w4a8, w8a8, bf16, attn-decode, attn-prefill, deltanet-prefill, deltanet-decode, model)",
                       metrale::Error);
}

TEST_CASE("attention rows count the cache bytes a decode reads and the causal FLOPs of a prefill") {
  const AttentionShape s;  // 32 q heads, 8 kv heads, head_dim 128, blocks of 16
  CHECK(s.name() == "attn-32q8kv-d128-b16");
  // K and V: 2 pools x 8 kv heads x 128 x 2 bytes = 4 KiB per token and sequence.
  CHECK(decode_cache_bytes(s, 1, 4096) == doctest::Approx(4096.0 * 4096));
  CHECK(decode_cache_bytes(s, 4, 512) == doctest::Approx(4.0 * 512 * 4096));
  // Row i of a chunk without past attends to i + 1 positions: 4 m (m + 1) / 2 * 128 * 32.
  CHECK(prefill_flops(s, 1) == doctest::Approx(4.0 * 128 * 32));
  CHECK(prefill_flops(s, 4096) == doctest::Approx(4.0 * 128 * 32 * 4096 * 4097 / 2));
}

TEST_CASE("the tier's dot peak is vdpbf16ps on the BF16 tier, the f32 FMA peak on the others, none off the CPU") {
  CHECK(tier_dot_of("cpu-x86_64-avx512bf16", 500, 250) == 500);
  CHECK(tier_dot_of("cpu-x86_64-avx512", 500, 250) == 250);
  CHECK(tier_dot_of("cpu-x86_64-avx2", 0, 90) == 90);
  CHECK(tier_dot_of("cuda-sm_90", 500, 250) == 0);
}

TEST_CASE("the attention targets take decode rows from 4k contexts and prefill rows from m = 4096") {
  const Denominators d{10, 0, 0, 100};  // a CPU without AVX512_BF16: the prefill is held to its FMA peak
  ThreadRun run;
  run.threads = 2;
  run.d = d;
  const auto attention = [&](const char* variant, uint32_t m, uint32_t context, double seconds) {
    Rate r = row(variant, "attention", m, seconds, d);
    r.preset = "attn-32q8kv-d128-b16";
    r.context = context;
    return r;
  };
  run.rates = {attention("attn-decode", 1, 512, 1.0),   // 0.1 of the bandwidth, under 4k: not held
               attention("attn-decode", 1, 4096, 0.125), attention("attn-decode", 4, 32768, 0.2),
               attention("attn-prefill", 512, 512, 0.5), attention("attn-prefill", 4096, 4096, 100.0),
               row("w4a16", "dense", 1, 0.125, d)};
  run.rates[4].flops = 4e12;  // 40 GFLOP/s of the 100 peak
  run.rates[4].gflop_per_s = run.rates[4].flops / run.rates[4].median_s / 1e9;
  set_ratios(run.rates[4], d);
  const auto t = targets_of(run);
  CHECK(target(t, 11).rows == 2);
  CHECK(*target(t, 11).worst == doctest::Approx(0.5));
  CHECK(target(t, 11).worst_context == 32768);
  CHECK(target(t, 11).goal == doctest::Approx(0.8));
  CHECK(target_cells(target(t, 11))[4] == "attn-32q8kv-d128-b16 attn-decode m=4 context=32768");
  CHECK(target(t, 12).rows == 1);
  CHECK(*target(t, 12).worst == doctest::Approx(0.4));
  CHECK(target(t, 12).goal == doctest::Approx(0.5));
  CHECK(target_json(target(t, 12))["worst_context"] == 4096);
  // The FFN targets take no attention row.
  CHECK(target(t, 1).rows == 1);
  CHECK(target(t, 3).rows == 0);
}

TEST_CASE("int8-activation rows are held to the int8 dot peak") {
  const Denominators d{10, 100, 400};
  const Rate r = row("w8a8", "dense", 64, 1.0, d);  // 64 GOP/s
  CHECK(r.of_int8_peak == doctest::Approx(0.16));
  CHECK(r.dot_s == doctest::Approx(64.0 / 400));
  const Rate b = row("w4a16", "dense", 64, 1.0, d);
  CHECK(b.dot_s == doctest::Approx(64.0 / 100));
}

TEST_CASE("targets take their rows and report the worst") {
  const Denominators d{10, 100, 400};
  ThreadRun run;
  run.threads = 2;
  run.d = d;
  run.rates = {row("w4a16", "dense", 1, 0.125, d),  row("w4a16", "dense", 64, 2.0, d),
               row("w4a16", "moe", 1, 0.2, d),      row("fp8", "moe", 1, 0.125, d),
               row("w4-zp", "dense", 1, 0.1, d),    row("w4-zp-act", "dense", 1, 0.2, d),
               row("w8a8", "dense", 64, 0.5, d),    row("w4a8", "dense", 64, 1.0, d)};
  const auto t = targets_of(run);
  CHECK(target(t, 1).rows == 1);
  CHECK(*target(t, 1).worst == doctest::Approx(0.8));
  CHECK(target(t, 3).rows == 2);  // W4A16 and FP8 experts
  CHECK(*target(t, 3).worst == doctest::Approx(0.5));
  CHECK(target(t, 3).worst_variant == "w4a16");
  CHECK(*target(t, 6).worst == doctest::Approx(0.5));
  CHECK(target(t, 6).worst_variant == "w4-zp-act");
  CHECK(target(t, 8).rows == 0);
  CHECK_FALSE(target(t, 8).worst.has_value());
  CHECK(*target(t, 9).worst == doctest::Approx(0.16));  // w4a8: 64 GOP/s of 400
  // W4A16 prefill took 2 s: w4a8 is 2x, w8a8 4x.
  CHECK(*target(t, 10).worst == doctest::Approx(2.0));
  CHECK(target(t, 10).worst_variant == "w4a8");
  CHECK(target_json(target(t, 10))["worst_m"] == 64);
}

namespace {

// A fake sysfs cpu directory: `cpus` CPUs, each with an L1d, an L2 of its own and the L3 shared
// per `per_l3` CPUs.
std::filesystem::path fake_sysfs(uint32_t cpus, uint32_t per_l3, const std::string& l3_size) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("metrale-sysfs-" + std::to_string(::getpid()) + "-" + std::to_string(cpus));
  fs::remove_all(root);
  auto write = [](const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  };
  for (uint32_t c = 0; c < cpus; ++c) {
    const fs::path cache = root / ("cpu" + std::to_string(c)) / "cache";
    write(cache / "index0" / "level", "1"), write(cache / "index0" / "type", "Data"), write(cache / "index0" / "size", "32K");
    write(cache / "index0" / "shared_cpu_list", std::to_string(c));
    write(cache / "index1" / "level", "1"), write(cache / "index1" / "type", "Instruction"), write(cache / "index1" / "size", "32K");
    write(cache / "index2" / "level", "2"), write(cache / "index2" / "type", "Unified"), write(cache / "index2" / "size", "1024K");
    write(cache / "index2" / "shared_cpu_list", std::to_string(c));
    const uint32_t first = c / per_l3 * per_l3;
    write(cache / "index3" / "level", "3"), write(cache / "index3" / "type", "Unified"), write(cache / "index3" / "size", l3_size);
    write(cache / "index3" / "shared_cpu_list", std::to_string(first) + "-" + std::to_string(first + per_l3 - 1));
  }
  fs::create_directories(root / "cpufreq");  // not a cpuN directory: ignored
  return root;
}

}  // namespace

TEST_CASE("a multi-thread peak that did not scale is flagged") {
  // Measured on a busy AMD EPYC VM: the 2-thread bf16 peak came out at 1.08 x the 1-thread one.
  const std::vector<PeakPoint> shared{{1, 469.8, 253.8, 1004.8}, {2, 508.9, 255.2, 996.7}};
  const std::string note = peak_scaling_note(shared);
  CHECK(note.find("WARNING: the 2-thread bf16 dot peak (508.9) is 1.08 x the 1-thread one (469.8)") != std::string::npos);
  CHECK(note.find("2-thread int8 dot peak") != std::string::npos);
  const std::vector<PeakPoint> quiet{{1, 469.8, 253.8, 1004.8}, {2, 926.7, 500.1, 1962.0}};
  CHECK(peak_scaling_note(quiet).empty());
  CHECK(peak_scaling_note({{1, 0, 250, 0}, {2, 0, 500, 0}}).empty());  // no dot units: nothing to compare
}

TEST_CASE("the last-level cache comes from sysfs and sizes the default eviction") {
  // Two CPUs sharing one 32 MB L3 (this project's AMD EPYC VM): 64 MB would be twice it, the
  // 256 MB floor stays.
  const auto one = last_level_cache(fake_sysfs(2, 2, "32768K").string());
  REQUIRE(one);
  CHECK(one->level == 3);
  CHECK(one->instances == 1);
  CHECK(one->bytes == size_t{32} << 20);
  CHECK(default_evict_mb(one) == 256);
  // A 300 MB L3 (an Intel Xeon VM with AMX): 600 MB, not the old fixed 256.
  const auto big = last_level_cache(fake_sysfs(2, 2, "307200K").string());
  REQUIRE(big);
  CHECK(default_evict_mb(big) == 600);
  CHECK(eviction_note(256, big).find("WARNING: --evict-mb 256 is under twice it") != std::string::npos);
  CHECK(eviction_note(600, big).find("WARNING") == std::string::npos);
  // Four CPUs, an L3 per pair: two instances, counted once each.
  const auto two = last_level_cache(fake_sysfs(4, 2, "16M").string());
  REQUIRE(two);
  CHECK(two->instances == 2);
  CHECK(two->bytes == size_t{32} << 20);
  // Nothing there: the floor, and a note saying so.
  CHECK_FALSE(last_level_cache("/nonexistent-sysfs"));
  CHECK(default_evict_mb(std::nullopt) == 256);
  CHECK(eviction_note(256, std::nullopt).find("not described by sysfs") != std::string::npos);
}

TEST_CASE("the eviction reads every line of its buffer once, however many threads share it") {
  // Word i holds i and one word per 64-byte line is read: the sum over lines 0..L-1 is
  // 8 * L(L-1)/2. A share split that dropped or repeated a line would change it.
  for (const size_t bytes : {size_t{64} * 1000, size_t{64} * 1000 + 24}) {
    const uint64_t lines = (bytes / 8 + 7) / 8, expected = 8 * lines * (lines - 1) / 2;
    for (const unsigned threads : {0u, 1u, 2u, 3u, 7u}) {
      CacheEvictor evictor(bytes);
      evictor.evict(threads);
      CHECK_MESSAGE(evictor.sink() == expected, bytes << " bytes on " << threads << " threads");
    }
  }
}
