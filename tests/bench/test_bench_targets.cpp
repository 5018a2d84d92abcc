// SPDX-License-Identifier: MIT OR Apache-2.0
// The layer bench's row selection and target evaluation (bench_rows.hpp, bench_targets.hpp) on
// made-up rows: which m each weight tier covers, which rows each target takes, and the figures.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "bench_rows.hpp"
#include "bench_targets.hpp"

#include <metrale/status.hpp>

#include <doctest/doctest.h>

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
  REQUIRE(v.size() == 7);
  const auto& zp = v[1];
  CHECK(zp.name == "w4-zp");
  CHECK_FALSE(zp.formats.symmetric);
  CHECK(zp.formats.group == 128);
  CHECK(v[2].formats.act_order);
  CHECK(zp.covers(1, false));
  CHECK_FALSE(zp.covers(8, false));
  CHECK(zp.covers(64, false));
  CHECK_FALSE(zp.covers(1, true));  // dense presets only
  CHECK(v[4].name == "fp8");
  CHECK(v[4].covers(1, true));
  CHECK_FALSE(v[4].covers(64, false));
  CHECK(v[5].activations == metrale::layers::ActivationQuant::int8);
  CHECK_FALSE(v[5].covers(1, false));
  CHECK_THROWS_WITH_AS(select_variants({"w4a16", "w3a16"}),
                       "--variants: unknown variant 'w3a16' (known: w4a16, w4-zp, w4-zp-act, w8a16, fp8, w4a8, w8a8)",
                       metrale::Error);
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
