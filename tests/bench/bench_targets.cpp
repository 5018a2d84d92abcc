// SPDX-License-Identifier: MIT OR Apache-2.0
#include "bench_targets.hpp"

#include <cstdio>
#include <functional>

namespace metrale::bench {

namespace {

using Pick = std::function<bool(const Rate&)>;
using Figure = std::function<double(const Rate&)>;

bool in(const Rate& r, std::initializer_list<const char*> variants) {
  for (const char* v : variants)
    if (r.variant == v) return true;
  return false;
}

// The lowest `value` among the rows `covers` picks; `ceiling`: that figure at the row's roofline.
TargetRow ratio_target(const ThreadRun& run, int id, const std::string& label, std::string metric, double goal,
                       const Pick& covers, const Figure& value, const Figure& ceiling) {
  TargetRow t;
  t.target = id;
  t.label = std::to_string(id) + ". " + label + " (" + threads_label(run.threads) + ")";
  t.threads = run.threads;
  t.metric = std::move(metric);
  t.comparison = ">=";
  t.goal = goal;
  for (const auto& r : run.rates) {
    if (!covers(r)) continue;
    const double v = value(r);
    if (v <= 0) continue;  // no denominator (or no W4A16 row to compare with)
    ++t.rows;
    if (!t.worst || v < *t.worst) {
      t.worst = v;
      t.worst_preset = r.preset;
      t.worst_variant = r.variant;
      t.worst_m = r.m;
      t.worst_context = r.context;
      t.roofline_allows = r.roofline_s > 0 ? ceiling(r) : 0;
    }
  }
  return t;
}

// The W4A16 row of the same preset and m (nullptr: none measured).
const Rate* w4a16_row(const ThreadRun& run, const Rate& r) {
  for (const auto& o : run.rates)
    if (o.variant == "w4a16" && o.preset == r.preset && o.m == r.m) return &o;
  return nullptr;
}

void launch_targets(const ThreadRun& run, std::vector<TargetRow>& out) {
  const std::string on = " (" + threads_label(run.threads) + ")";
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
}

}  // namespace

std::vector<TargetRow> targets_of(const ThreadRun& run) {
  std::vector<TargetRow> out;
  const Figure of_bw = [](const Rate& r) { return r.of_bandwidth; };
  const Figure bw_ceiling = [](const Rate& r) { return r.memory_s / r.roofline_s; };
  const Figure of_bf16 = [](const Rate& r) { return r.of_bf16_peak; };
  const Figure bf16_ceiling = [](const Rate& r) { return r.dot_s / r.roofline_s; };
  const Figure of_int8 = [](const Rate& r) { return r.of_int8_peak; };
  const bool bf16 = run.d.bf16_dot > 0;
  out.push_back(ratio_target(run, 1, "decode m=1..8, dense W4A16, of read bw", "fraction_of_read_bandwidth", 0.85,
                             [](const Rate& r) { return r.ffn == "dense" && r.m <= 8 && in(r, {"w4a16"}); }, of_bw,
                             bw_ceiling));
  out.push_back(ratio_target(run, 2, "prefill m=64..512, W4A16, of bf16 dot peak", "fraction_of_bf16_dot_peak", 0.60,
                             [&](const Rate& r) { return bf16 && r.m >= 64 && r.m <= 512 && in(r, {"w4a16"}); },
                             of_bf16, bf16_ceiling));
  out.push_back(ratio_target(run, 3, "MoE decode m=1, W4A16/FP8 experts, of read bw", "fraction_of_read_bandwidth",
                             0.85, [](const Rate& r) { return r.ffn == "moe" && r.m == 1; }, of_bw, bw_ceiling));
  launch_targets(run, out);
  out.push_back(ratio_target(run, 6, "decode m=1, dense w4-zp asym/act-order, of read bw", "fraction_of_read_bandwidth",
                             0.85, [](const Rate& r) { return r.m == 1 && in(r, {"w4-zp", "w4-zp-act", "ct-act-order"}); },
                             of_bw, bw_ceiling));
  out.push_back(ratio_target(run, 7, "prefill m>=64, w4-zp asym/act-order, of bf16 dot peak",
                             "fraction_of_bf16_dot_peak", 0.80,
                             [&](const Rate& r) { return bf16 && r.m >= 64 && in(r, {"w4-zp", "w4-zp-act", "ct-act-order"}); },
                             of_bf16, bf16_ceiling));
  out.push_back(ratio_target(run, 8, "decode m=1, dense W8A16/FP8/block FP8, of read bw", "fraction_of_read_bandwidth", 0.85,
                             [](const Rate& r) { return r.ffn == "dense" && r.m == 1 && in(r, {"w8a16", "fp8", "fp8-block"}); },
                             of_bw, bw_ceiling));
  out.push_back(ratio_target(run, 9, "prefill m>=64, W4A8/W8A8, of int8 dot peak", "fraction_of_int8_dot_peak", 0.70,
                             [](const Rate& r) { return r.m >= 64 && in(r, {"w4a8", "w8a8"}); }, of_int8,
                             [](const Rate& r) { return r.dot_s / r.roofline_s; }));
  out.push_back(ratio_target(
      run, 10, "prefill m>=64, W4A8/W8A8 rate over W4A16's", "speedup_over_w4a16", 1.5,
      [](const Rate& r) { return r.m >= 64 && in(r, {"w4a8", "w8a8"}); },
      [&](const Rate& r) { const Rate* w = w4a16_row(run, r); return w ? w->median_s / r.median_s : 0.0; },
      [&](const Rate& r) { const Rate* w = w4a16_row(run, r); return w ? w->median_s / r.roofline_s : 0.0; }));
  out.push_back(ratio_target(run, 11, "attention decode, contexts >= 4k, of read bw", "fraction_of_read_bandwidth",
                             0.80, [](const Rate& r) { return r.context >= 4096 && in(r, {"attn-decode"}); }, of_bw,
                             bw_ceiling));
  out.push_back(ratio_target(run, 12, "attention prefill m >= 4096, of its tier's dot peak", "fraction_of_tier_dot_peak",
                             0.50, [](const Rate& r) { return r.m >= 4096 && in(r, {"attn-prefill"}); },
                             [](const Rate& r) { return r.of_tier_peak; }, bf16_ceiling));
  return out;
}

nlohmann::json target_json(const TargetRow& t) {
  nlohmann::json j{{"target", t.target},   {"label", t.label},   {"threads", t.threads},
                   {"metric", t.metric},   {"comparison", t.comparison}, {"goal", t.goal},
                   {"rows", t.rows},       {"worst", t.worst ? nlohmann::json(*t.worst) : nullptr}};
  if (t.ratio()) {
    j["worst_preset"] = t.worst ? nlohmann::json(t.worst_preset) : nullptr;
    j["worst_variant"] = t.worst ? nlohmann::json(t.worst_variant) : nullptr;
    j["worst_m"] = t.worst ? nlohmann::json(t.worst_m) : nullptr;
    j["worst_context"] = t.worst && t.worst_context ? nlohmann::json(t.worst_context) : nullptr;
    j["roofline_allows"] = t.roofline_allows ? nlohmann::json(*t.roofline_allows) : nullptr;
  }
  return j;
}

std::vector<std::string> target_cells(const TargetRow& t) {
  auto f = [](double v, int digits) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", digits, v);
    return std::string(text);
  };
  const int digits = t.metric == "try_kernel_hit_ns" ? 0 : 3;
  const bool ratio = t.ratio();
  return {t.label, std::to_string(t.rows), t.worst ? f(*t.worst, digits) : "n/a",
          t.comparison + " " + (ratio ? f(t.goal, 2) : f(t.goal, 0)),
          !ratio    ? "-"
          : t.worst ? t.worst_preset + " " + t.worst_variant + " m=" + std::to_string(t.worst_m) +
                          (t.worst_context ? " context=" + std::to_string(t.worst_context) : "")
                    : "no row measured",
          ratio && t.roofline_allows ? f(*t.roofline_allows, 3) : "-"};
}

}  // namespace metrale::bench
