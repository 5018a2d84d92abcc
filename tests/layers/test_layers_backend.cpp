// SPDX-License-Identifier: MIT OR Apache-2.0
// The layers on the CPU backend against the double-precision reference (tolerance in
// model/reference.hpp), the fallback chain as the audit shows it, and FfnComponent::None.
// Run under several lever settings by meson (METRALE_W4A16_K64_MIN_K, METRALE_NO_K64_N64): the
// expectations below are computed from the levers this process sees.
#include <doctest/doctest.h>

#include "backend_support.hpp"
#include "ffn/ffn.hpp"
#include "core/numeric.hpp"
#include "reference/reference.hpp"
#include "linear/selectors.hpp"
#include "test_support.hpp"

#include <metrale/levers.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

using namespace metrale;
using namespace metrale::layers;
using namespace layers_test;

namespace {

uint64_t last_sequence(Backend& b) {
  uint64_t last = 0;
  for (const auto& row : b.audit().snapshot()) last = std::max(last, row.sequence);
  return last;
}

std::vector<AuditRow> rows_since(Backend& b, uint64_t after) {
  std::vector<AuditRow> out;
  for (const auto& row : b.audit().snapshot())
    if (row.sequence > after) out.push_back(row);
  return out;
}

const AuditRow* find_row(const std::vector<AuditRow>& rows, const std::string& kernel) {
  for (const auto& row : rows)
    if (row.kernel == kernel) return &row;
  return nullptr;
}

// Runs the FFN on m synthetic rows and compares with the reference.
Comparison run_and_check(Backend& b, FfnComponent& ffn, const FfnWeights& w, const ModelConfig& c, uint32_t m,
                         uint64_t seed) {
  auto x = synthetic_activations(m, c.hidden_size, seed);
  DeviceBuffer dx(b, x.size() * 2);
  dx.upload(std::span<const uint16_t>(x));
  DevicePtr y = ffn.forward(dx.ptr(), m);
  b.synchronize();
  std::vector<uint16_t> got(x.size());
  b.copy_to_host(got.data(), y, got.size() * 2);
  b.synchronize();
  ReferenceOutput ref = reference_ffn(w, c, x, m);
  return compare_to_reference(got, ref);
}

std::string tier_of(const std::vector<PlanStep>& plan, const std::string& step) {
  for (const auto& s : plan)
    if (s.step == step) return s.kernel;
  return "(no step " + step + ")";
}

}  // namespace

TEST_CASE("dense FFN matches the reference for decode, batched decode and prefill rows") {
  auto b = cpu_backend();
  for (const char* preset : {"small-dense", "small-dense-gelu"}) {
    ModelConfig c = *preset_config(preset);
    FfnWeights w = synthetic_ffn_weights(c, 21);
    FfnComponent ffn = FfnComponent::build(*b, c, w);
    REQUIRE(ffn.kind() == FfnKind::dense);
    for (uint32_t m : {1u, 2u, 3u, 8u, 9u, 64u, 200u}) {
      CAPTURE(preset);
      CAPTURE(m);
      Comparison cmp = run_and_check(*b, ffn, w, c, m, 100 + m);
      INFO(cmp.summary());
      CHECK(cmp.passed());
    }
  }
}

TEST_CASE("dense dispatch by m: GEMV, batched GEMV, then the tile-GEMM site of section 7") {
  auto b = cpu_backend();
  ModelConfig c = *preset_config("small-dense");  // gate_up K = 256, down K = 512
  FfnComponent ffn = FfnComponent::build(*b, c, synthetic_ffn_weights(c, 1));
  const uint32_t min_k = w4a16_k64_min_k();
  auto tile_for = [&](uint32_t k) -> std::string {
    if (k >= min_k) return "w4a16/w4a16_gemm_t_k64";  // the CPU has no n64 twin
    return "w4a16/w4a16_gemm_t";                          // nor any _p3
  };
  CHECK(tier_of(ffn.plan(1), "ffn.gate_up") == "w4a16/w4a16_gemv");
  CHECK(tier_of(ffn.plan(1), "ffn.down") == "w4a16/w4a16_gemv");
  CHECK(tier_of(ffn.plan(2), "ffn.gate_up") == "w4a16/w4a16_gemv_b8");
  CHECK(tier_of(ffn.plan(8), "ffn.down") == "w4a16/w4a16_gemv_b8");
  CHECK(tier_of(ffn.plan(9), "ffn.gate_up") == tile_for(256));
  CHECK(tier_of(ffn.plan(9), "ffn.down") == tile_for(512));
  CHECK(tier_of(ffn.plan(200), "ffn.down") == tile_for(512));
  CHECK(tier_of(ffn.plan(3), "ffn.act") == "act/silu_mul");
}

TEST_CASE("the audit shows what the dense layer resolved and the fallbacks it took") {
  auto b = cpu_backend();
  ModelConfig c = *preset_config("small-dense");
  const uint64_t before = last_sequence(*b);
  FfnComponent ffn = FfnComponent::build(*b, c, synthetic_ffn_weights(c, 1));
  auto rows = rows_since(*b, before);
  const uint32_t min_k = w4a16_k64_min_k();
  const bool some_below = 256 < min_k;   // gate_up K
  const bool some_above = 512 >= min_k;  // down K

  for (const auto& row : rows) CHECK(contains(row.site.file, "layers/ffn/"));
  REQUIRE(find_row(rows, "w4a16_gemv"));
  CHECK(find_row(rows, "w4a16_gemv")->outcome == LookupOutcome::resolved);
  CHECK(find_row(rows, "w4a16_gemv_b8")->outcome == LookupOutcome::resolved);
  CHECK(find_row(rows, "silu_mul")->outcome == LookupOutcome::resolved);
  REQUIRE(find_row(rows, "w4a16_repack"));  // the weights are loaded through the backend's repack
  CHECK(find_row(rows, "w4a16_repack")->outcome == LookupOutcome::resolved);
  CHECK(!find_row(rows, "w4a16_gemm_t_m128_v2"));  // no lookup unless METRALE_W4A16_VARIANT opts in
  if (some_below) {
    REQUIRE(find_row(rows, "w4a16_gemm_t_p3"));
    CHECK(find_row(rows, "w4a16_gemm_t_p3")->outcome == LookupOutcome::null_handle);  // GPU-only pipeline
    CHECK(find_row(rows, "w4a16_gemm_t")->outcome == LookupOutcome::resolved);
  } else {
    CHECK(!find_row(rows, "w4a16_gemm_t"));
  }
  if (some_above) {
    REQUIRE(find_row(rows, "w4a16_gemm_t_k64_p3"));
    CHECK(find_row(rows, "w4a16_gemm_t_k64_p3")->outcome == LookupOutcome::null_handle);
    CHECK(find_row(rows, "w4a16_gemm_t_k64")->outcome == LookupOutcome::resolved);
    if (lever_is_set("METRALE_NO_K64_N64")) {
      CHECK(!find_row(rows, "w4a16_gemm_t_k64_n64_p3"));
    } else {
      REQUIRE(find_row(rows, "w4a16_gemm_t_k64_n64_p3"));
      CHECK(find_row(rows, "w4a16_gemm_t_k64_n64_p3")->outcome == LookupOutcome::null_handle);
    }
  } else {
    CHECK(!find_row(rows, "w4a16_gemm_t_k64"));
    CHECK(!find_row(rows, "w4a16_gemm_t_k64_n64_p3"));
  }

  // The lever that placed the k64 switch is noted on every tile-GEMM row, and only there.
  const std::string switch_lever = lever_note("METRALE_W4A16_K64_MIN_K");
  for (const auto& row : rows) {
    CAPTURE(row.kernel);
    if (!row.kernel.starts_with("w4a16_gemm_t")) {
      CHECK(!contains(row.lever, "METRALE_W4A16_K64_MIN_K"));
      continue;
    }
    CHECK(contains(row.lever, switch_lever));
    if (switch_lever.empty()) CHECK(!contains(row.lever, "METRALE_W4A16_K64_MIN_K"));
  }
  // Every lookup of the projection set carries its tier when it is made; the activation's has none.
  for (const auto& row : rows) {
    CAPTURE(row.kernel);
    if (row.module == "act") {
      CHECK(row.annotations.empty());
      continue;
    }
    REQUIRE(row.annotation("tier"));
    CHECK(*row.annotation("tier") == "bf16/w4a16");
    REQUIRE(row.annotation("tier_note"));
    CHECK(*row.annotation("tier_note") == "w4a16: bf16 activations (default)");
  }

  // build_ffn_for_audit resolves the same kernels, in the same order, without building.
  auto audit_rows = build_ffn_for_audit(*b, c);
  REQUIRE(audit_rows.size() == rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(audit_rows[i].kernel == rows[i].kernel);
    CHECK(audit_rows[i].outcome == rows[i].outcome);
  }
}

TEST_CASE("MoE matches the reference, grouped and per expert, with a shared expert") {
  auto b = cpu_backend();
  ModelConfig c = *preset_config("small-moe");
  FfnWeights w = synthetic_ffn_weights(c, 33);
  for (bool grouped : {true, false}) {
    CAPTURE(grouped);
    const uint64_t before = last_sequence(*b);
    FfnComponent ffn = FfnComponent::build(*b, c, w, FfnBuildOptions{MoeBuildOptions{.use_grouped_kernel = grouped}, {}});
    auto rows = rows_since(*b, before);
    REQUIRE(ffn.moe());
    CHECK(ffn.moe()->grouped() == grouped);
    CHECK(static_cast<bool>(find_row(rows, "w4a16_grouped_gemm")) == grouped);
    // Without the grouped kernel the experts resolve the dense projection chain.
    CHECK(std::count_if(rows.begin(), rows.end(), [](const AuditRow& r) { return r.kernel == "w4a16_gemv"; }) ==
          (grouped ? 1 : 2));  // the shared expert resolves its own
    for (uint32_t m : {1u, 3u, 8u, 9u, 64u}) {
      CAPTURE(m);
      Comparison cmp = run_and_check(*b, ffn, w, c, m, 500 + m);
      INFO(cmp.summary());
      CHECK(cmp.passed());
      uint32_t routed = 0;
      for (uint32_t n : ffn.moe()->last_expert_rows()) routed += n;
      CHECK(routed == m * c.num_experts_per_tok);
    }
    const std::string plan_experts = tier_of(ffn.plan(9), "ffn.experts.gate_up");
    CHECK(plan_experts == (grouped ? "moe/w4a16_grouped_gemm" : "w4a16/w4a16_gemv_b8"));  // 18 rows / 8 experts -> 2
  }
}

TEST_CASE("MoE without renormalisation and with an ungated shared expert") {
  auto b = cpu_backend();
  ModelConfig c = *preset_config("small-moe");
  c.norm_topk_prob = false;
  FfnWeights w = synthetic_ffn_weights(c, 77);
  w.moe->shared_expert_gate.clear();
  FfnComponent ffn = FfnComponent::build(*b, c, w);
  for (uint32_t m : {1u, 17u}) {
    CAPTURE(m);
    Comparison cmp = run_and_check(*b, ffn, w, c, m, m);
    INFO(cmp.summary());
    CHECK(cmp.passed());
  }
}

TEST_CASE("a wrong result is caught: the comparison is not vacuous") {
  auto b = cpu_backend();
  ModelConfig c = *preset_config("small-dense");
  FfnWeights w = synthetic_ffn_weights(c, 4);
  FfnComponent ffn = FfnComponent::build(*b, c, w);
  // Reference from weights with one scale group changed: the layer's output must fail it.
  FfnWeights tampered = w;
  tampered.dense->down.scales[7] = f32_to_f16(f16_to_f32(tampered.dense->down.scales[7]) * 1.25f);
  auto x = synthetic_activations(4, c.hidden_size, 9);
  DeviceBuffer dx(*b, x.size() * 2);
  dx.upload(std::span<const uint16_t>(x));
  DevicePtr y = ffn.forward(dx.ptr(), 4);
  std::vector<uint16_t> got(x.size());
  b->copy_to_host(got.data(), y, got.size() * 2);
  b->synchronize();
  CHECK(compare_to_reference(got, reference_ffn(w, c, x, 4)).passed());
  CHECK(!compare_to_reference(got, reference_ffn(tampered, c, x, 4)).passed());
}

TEST_CASE("FfnComponent::None returns its input and launches nothing") {
  auto b = cpu_backend();
  ModelConfig c = parse_model_config(nlohmann::json{{"hidden_size", 256}}, "no-ffn");
  REQUIRE(c.ffn_kind() == FfnKind::none);
  const uint64_t before = last_sequence(*b);
  FfnComponent ffn = FfnComponent::build(*b, c, synthetic_ffn_weights(c, 1));
  CHECK(ffn.is_none());
  DeviceBuffer x(*b, 256 * 2 * 3);
  CHECK(ffn.forward(x.ptr(), 3) == x.ptr());
  CHECK(ffn.forward_decode(x.ptr()) == x.ptr());
  CHECK(ffn.forward_prefill(x.ptr(), 3) == x.ptr());
  CHECK(rows_since(*b, before).empty());
  CHECK(build_ffn_for_audit(*b, c).empty());
  CHECK(ffn.weight_bytes() == 0);
}

TEST_CASE("forward entry points check their row ranges; build checks the weights") {
  auto b = cpu_backend();
  ModelConfig c = *preset_config("small-dense");
  FfnWeights w = synthetic_ffn_weights(c, 1);
  FfnComponent ffn = FfnComponent::build(*b, c, w);
  DeviceBuffer x(*b, 256 * 2 * 9);
  CHECK(contains(error_of([&] { ffn.forward_batched(x.ptr(), 9); }), "1..8 rows"));
  CHECK(contains(error_of([&] { ffn.forward(x.ptr(), 0); }), "m >= 1"));
  ModelConfig other = c;
  other.intermediate_size = 384;
  CHECK(contains(error_of([&] { FfnComponent::build(*b, other, w); }), "ffn.gate_up: shape [1, 1024, 256], expected [1, 768, 256]"));
  CHECK(contains(error_of([&] { FfnComponent::build(*b, *preset_config("small-moe"), w); }), "weights are for a dense FFN"));
  // The same input gives the same output twice.
  auto in = synthetic_activations(5, 256, 3);
  x.upload(std::span<const uint16_t>(in));
  std::vector<uint16_t> first(5 * 256), second(5 * 256);
  b->copy_to_host(first.data(), ffn.forward(x.ptr(), 5), first.size() * 2);
  b->synchronize();
  b->copy_to_host(second.data(), ffn.forward(x.ptr(), 5), second.size() * 2);
  b->synchronize();
  CHECK(first == second);
}

TEST_CASE("the CPU backend loads W4A16 weights into its cpu-native layout, sizes kept") {
  auto b = cpu_backend();
  const QuantMatrix w = synthetic_w4a16("experts", 17, 384, 5, 3);  // a stack of 3, odd N
  const DeviceQuantMatrix d = DeviceQuantMatrix::upload(*b, w);
  CHECK(d.layout == "cpu-native");
  CHECK(d.batch == 3);
  CHECK(d.qweight.bytes() == w.qweight_bytes());
  CHECK(d.scales.bytes() == w.scales_bytes());
  CHECK(d.qweight_of(2) == d.qweight.at(2 * w.qweight_bytes() / 3));  // per-matrix offsets stay canonical
  for (const char* name : {"w4a16_gemv", "w4a16_gemv_b8", "w4a16_gemm_t", "w4a16_gemm_t_k64"}) {
    CAPTURE(name);
    CHECK(weight_layout_of(*b, b->kernel("w4a16", name)) == "cpu-native");
    CHECK_NOTHROW(require_weight_layout(*b, b->kernel("w4a16", name), d.layout));
  }
  CHECK(weight_layout_of(*b, b->kernel("moe", "w4a16_grouped_gemm")) == "cpu-native");
  CHECK(weight_layout_of(*b, KernelHandle{}) == kCanonicalW4a16Layout);
  try {
    require_weight_layout(*b, b->kernel("w4a16", "w4a16_gemv"), kCanonicalW4a16Layout);
    FAIL("canonical weights accepted for a cpu-native kernel");
  } catch (const Error& e) {
    CHECK(e.status() == Status::incompatible);
    CHECK(contains(e.what(), "w4a16/w4a16_gemv on backend 'cpu' reads its weights in layout 'cpu-native', "
                             "but the weights are in layout 'w4a16-nk-g128'"));
  }
}
