// SPDX-License-Identifier: MIT OR Apache-2.0
// The reference itself, checked on cases small enough to work out by hand, and the comparison.
#include <doctest/doctest.h>

#include "core/numeric.hpp"
#include "reference/reference.hpp"
#include "test_support.hpp"

#include <nlohmann/json.hpp>

#include <cmath>

using namespace metrale::layers;
using namespace layers_test;

namespace {
uint16_t bf(float v) { return f32_to_bf16(v); }
}  // namespace

TEST_CASE("reference projection on a matrix worked out by hand") {
  // Row 0: codes 9 (value +1 step) everywhere, scale 0.5 -> every weight 0.5.
  // Row 1: first group codes 6 (-2 steps) with scale 0.25 -> -0.5; second group code 8 -> 0.
  QuantMatrix w = w4a16_zeros("hand", 2, 256);
  for (size_t i = 0; i < 32; ++i) w.qweight[i] = 0x99999999u;
  for (size_t i = 32; i < 48; ++i) w.qweight[i] = 0x66666666u;
  w.scales = {f32_to_f16(0.5f), f32_to_f16(0.5f), f32_to_f16(0.25f), f32_to_f16(3.0f)};
  std::vector<uint16_t> x(2 * 256, bf(1.0f));
  for (size_t k = 256; k < 512; ++k) x[k] = bf(k % 2 ? -2.0f : 1.0f);
  ReferenceOutput r = reference_projection(w.view(), x, 2);
  CHECK(r.value[0] == 128.0);   // 256 * 0.5
  CHECK(r.value[1] == -64.0);   // 128 * -0.5
  CHECK(r.value[2] == -64.0);   // 0.5 * (128 * 1 + 128 * -2)
  CHECK(r.value[3] == 32.0);    // -0.5 * (64 * 1 + 64 * -2)
  // The budget: 2^-7 |r| + 2^-12 sum |terms|.
  CHECK(r.bound[0] == doctest::Approx(128.0 / 128 + 128.0 / 4096));
  CHECK(r.bound[2] == doctest::Approx(64.0 / 128 + (64.0 + 128.0) / 4096));
}

TEST_CASE("activations follow the act kernels' contract") {
  CHECK(reference_activation(Activation::silu, 0.0) == 0.0);
  CHECK(reference_activation(Activation::silu, 2.0) == doctest::Approx(2.0 / (1.0 + std::exp(-2.0))));
  CHECK(reference_activation(Activation::gelu_tanh, 1.0) == doctest::Approx(0.8411919906082768));
  CHECK(reference_activation(Activation::gelu_tanh, -3.0) == doctest::Approx(-0.0036373920817729943));
}

TEST_CASE("dense reference = dequantized matmuls with bf16 intermediates") {
  ModelConfig c = *preset_config("small-dense");
  FfnWeights w = synthetic_ffn_weights(c, 3);
  const uint32_t m = 3;
  auto x = synthetic_activations(m, 256, 4);
  ReferenceOutput r = reference_dense_ffn(*w.dense, Activation::silu, x, m);
  // Recompute independently from the f32 dequantized matrices.
  auto gu = dequantize(w.dense->gate_up);
  auto dn = dequantize(w.dense->down);
  for (uint32_t row = 0; row < m; ++row) {
    std::vector<double> a(512);
    for (uint32_t j = 0; j < 512; ++j) {
      double g = 0, u = 0;
      for (uint32_t k = 0; k < 256; ++k) {
        g += static_cast<double>(gu[size_t{j} * 256 + k]) * bf16_to_f32(x[size_t{row} * 256 + k]);
        u += static_cast<double>(gu[size_t{512 + j} * 256 + k]) * bf16_to_f32(x[size_t{row} * 256 + k]);
      }
      g = bf16_to_f32(f64_to_bf16(g));
      u = bf16_to_f32(f64_to_bf16(u));
      a[j] = bf16_to_f32(f64_to_bf16(g / (1 + std::exp(-g)) * u));
    }
    for (uint32_t h = 0; h < 256; ++h) {
      double y = 0;
      for (uint32_t j = 0; j < 512; ++j) y += static_cast<double>(dn[size_t{h} * 512 + j]) * a[j];
      REQUIRE(r.value[size_t{row} * 256 + h] == doctest::Approx(y).epsilon(1e-12));
    }
  }
  // Outputs have a sensible spread (synthetic scaling works end to end).
  double sq = 0;
  for (double v : r.value) sq += v * v;
  const double rms = std::sqrt(sq / static_cast<double>(r.value.size()));
  CHECK(rms > 0.01);
  CHECK(rms < 10);
}

TEST_CASE("top-k softmax: descending, ties to the lower id, renormalisation, near ties flagged") {
  std::vector<double> logits{1.0, 3.0, 3.0, 0.5,    // tie between experts 1 and 2
                             2.0, 1.0, 0.0, -1.0};
  ReferenceRouting plain = reference_topk_softmax(logits, {}, 2, 4, 2, false);
  CHECK(plain.ids == std::vector<int32_t>{1, 2, 0, 1});
  const double z = std::exp(1.0 - 3) + 2 + std::exp(0.5 - 3);
  CHECK(plain.weights[0] == doctest::Approx(1.0 / z));
  CHECK(plain.weights[1] == doctest::Approx(1.0 / z));
  ReferenceRouting renorm = reference_topk_softmax(logits, {}, 2, 4, 2, true);
  CHECK(renorm.weights[0] + renorm.weights[1] == doctest::Approx(1.0));
  CHECK(renorm.weights[2] == doctest::Approx(1.0 / (1.0 + std::exp(-1.0))));
  CHECK(renorm.ambiguous == std::vector<uint8_t>{0, 0});
  // The 2nd and 3rd logits of row 0 differ by 1e-9 at a scale of 10: f32 cannot tell them apart.
  std::vector<double> near{1.0, 3.0, 3.0 - 1e-9, 0.5};
  std::vector<double> scale(4, 10.0);
  CHECK(reference_topk_softmax(near, scale, 1, 4, 1, false).ambiguous[0] == 1);  // k=1: 3 vs 3 - 1e-9
  CHECK(reference_topk_softmax(near, scale, 1, 4, 2, false).ambiguous[0] == 0);  // k=2: 3 - 1e-9 vs 1
  std::vector<double> boundary{1.0, 3.0, 1.0 + 1e-9, 0.5};
  CHECK(reference_topk_softmax(boundary, scale, 1, 4, 2, false).ambiguous[0] == 1);
}

TEST_CASE("MoE reference with one expert equals the dense reference") {
  ModelConfig c = parse_model_config(nlohmann::json{{"hidden_size", 256}, {"num_experts", 1}, {"num_experts_per_tok", 1},
                                      {"moe_intermediate_size", 256}, {"hidden_act", "silu"}}, "one-expert");
  FfnWeights w = synthetic_ffn_weights(c, 8);
  auto x = synthetic_activations(4, 256, 2);
  ReferenceOutput moe = reference_moe(*w.moe, c, x, 4);
  DenseFfnWeights as_dense{w.moe->gate_up, w.moe->down, {}, {}};
  ReferenceOutput dense = reference_dense_ffn(as_dense, Activation::silu, x, 4);
  for (size_t i = 0; i < moe.value.size(); ++i) {
    // The MoE output is the expert's bf16-stored row times weight 1.
    REQUIRE(moe.value[i] == bf16_to_f32(f64_to_bf16(dense.value[i])));
    REQUIRE(moe.bound[i] > 0);
  }
}

TEST_CASE("the comparison counts violations, rejects NaN and skips excluded rows") {
  ReferenceOutput r;
  r.m = 2;
  r.n = 2;
  r.value = {1.0, -2.0, 4.0, 0.5};
  r.bound = {0.01, 0.01, 0.01, 0.01};
  r.row_excluded = {0, 0};
  std::vector<uint16_t> exact{bf(1.0f), bf(-2.0f), bf(4.0f), bf(0.5f)};
  Comparison ok = compare_to_reference(exact, r);
  CHECK(ok.passed());
  CHECK(ok.checked == 4);
  CHECK(ok.max_abs == 0);
  std::vector<uint16_t> off = exact;
  off[3] = bf(0.53125f);
  Comparison bad = compare_to_reference(off, r);
  CHECK(!bad.passed());
  CHECK(bad.violations == 1);
  CHECK(bad.worst_row == 1);
  CHECK(bad.worst_col == 1);
  CHECK(bad.max_abs == doctest::Approx(0.03125));
  CHECK(bad.max_rel == 0);  // 0.5 is below rms/4 (0.58): no relative error reported for it
  off[3] = bf(0.5f);
  off[0] = bf(1.0625f);
  CHECK(compare_to_reference(off, r).max_rel == doctest::Approx(0.0625));
  off[0] = bf(1.0f);
  off[3] = bf(0.53125f);
  CHECK(contains(bad.summary(), "FAIL"));
  off[3] = bf(NAN);
  CHECK(compare_to_reference(off, r).violations == 1);
  r.row_excluded = {0, 1};
  Comparison skipped = compare_to_reference(off, r);
  CHECK(skipped.passed());
  CHECK(skipped.excluded_rows == 1);
  CHECK(skipped.checked == 2);
  CHECK(contains(skipped.summary(), "excluded"));
}
