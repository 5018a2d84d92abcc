// SPDX-License-Identifier: MIT OR Apache-2.0
// W4A16 packing, quantization, dequantization, shape errors and synthetic weights.
#include <doctest/doctest.h>

#include "core/numeric.hpp"
#include "core/rng.hpp"
#include "core/w4a16.hpp"

#include <metrale/status.hpp>

#include <cmath>
#include <string>
#include <vector>

using namespace metrale::layers;

namespace {
std::vector<float> random_matrix(size_t count, uint64_t seed, double amplitude = 1.0) {
  SplitMix64 rng(seed);
  std::vector<float> out(count);
  for (auto& v : out) v = static_cast<float>(rng.uniform(-amplitude, amplitude));
  return out;
}

std::string error_text(auto&& fn) {
  try {
    fn();
  } catch (const metrale::Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("codes are packed 8 per u32 along K, lowest nibble first") {
  QuantMatrix m = w4a16_zeros("t", 2, 128);
  m.qweight[0] = 0x76543210u;  // row 0, k = 0..7 hold codes 0..7
  m.qweight[16 + 1] = 0xf8888888u;  // row 1, k = 15 holds code 15, k = 8..14 code 8
  m.scales[0] = f32_to_f16(0.5f);
  m.scales[1] = f32_to_f16(2.0f);
  QuantView v = m.view();
  for (uint32_t k = 0; k < 8; ++k) CHECK(v.code(0, k) == k);
  CHECK(v.value(0, 0) == -4.0);  // (0 - 8) * 0.5
  CHECK(v.value(0, 7) == -0.5);
  CHECK(v.code(1, 15) == 15);
  CHECK(v.value(1, 15) == 14.0);   // (15 - 8) * 2
  CHECK(v.value(1, 14) == 0.0);    // code 8 is zero
  CHECK(v.code(0, 8) == 8);       // untouched words keep the zero code
}

TEST_CASE("quantize then dequantize stays within half a step per element") {
  const uint32_t n = 5, k = 384;
  auto w = random_matrix(size_t{n} * k, 7, 3.0);
  QuantMatrix q = quantize_w4a16("proj", n, k, w);
  auto back = dequantize(q);
  QuantView v = q.view();
  for (uint32_t r = 0; r < n; ++r) {
    for (uint32_t c = 0; c < k; ++c) {
      const double s = v.scale(r, c / 128);
      // Half a step, plus what rounding s to fp16 (2^-11 relative) costs at the clamped end,
      // where |w| = max|w| is 7.5 steps away and lands on code 15 (7 steps).
      REQUIRE(std::fabs(back[size_t{r} * k + c] - w[size_t{r} * k + c]) <= 0.5 * s + 7.5 * s * 0x1.0p-11);
    }
  }
  // GPTQ's symmetric scale: max|w| * 2/15, rounded to fp16.
  float amax = 0;
  for (uint32_t c = 0; c < 128; ++c) amax = std::max(amax, std::fabs(w[c]));
  CHECK(q.scales[0] == f32_to_f16(amax * (2.0f / 15.0f)));
}

TEST_CASE("values on the grid quantize exactly, from f32 and bf16") {
  // Every code times a power-of-two scale: exactly representable, so the round trip is exact.
  const uint32_t n = 3, k = 128;
  std::vector<float> w(size_t{n} * k);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((static_cast<int>(i % 15) - 7)) * 0.25f;
  for (uint32_t r = 0; r < n; ++r) w[size_t{r} * k] = 7.5f * 0.25f;  // amax makes the scale exactly 0.25
  QuantMatrix q = quantize_w4a16("grid", n, k, w);
  std::vector<uint16_t> wb(w.size());
  f32_to_bf16(w, wb);
  QuantMatrix qb = quantize_w4a16_bf16("grid", n, k, wb);
  CHECK(q.qweight == qb.qweight);
  CHECK(q.scales == qb.scales);
  auto back = dequantize(q);
  for (size_t i = 0; i < w.size(); ++i) {
    if (i % k == 0) continue;  // 7.5 steps: clamps to code 15 (7 steps)
    REQUIRE(back[i] == w[i]);
  }
  CHECK(back[0] == 7.0f * 0.25f);
}

TEST_CASE("an all-zero group quantizes to code 8 with scale 0") {
  std::vector<float> w(128, 0.0f);
  QuantMatrix q = quantize_w4a16("zero", 1, 128, w);
  CHECK(q.scales[0] == 0);
  for (uint32_t word : q.qweight) CHECK(word == 0x88888888u);
}

TEST_CASE("K not a multiple of 128 is a construction error naming the tensor and K") {
  std::string text = error_text([] { w4a16_zeros("model.ffn.down", 64, 200); });
  CHECK(text.find("model.ffn.down") != std::string::npos);
  CHECK(text.find("K = 200") != std::string::npos);
  std::vector<float> w(64 * 100);
  text = error_text([&] { quantize_w4a16("gate", 64, 100, w); });
  CHECK(text.find("gate") != std::string::npos);
  CHECK(text.find("K = 100") != std::string::npos);
  CHECK(error_text([] { synthetic_w4a16("s", 4, 129, 1); }).find("K = 129") != std::string::npos);
  CHECK(error_text([] { w4a16_zeros("empty", 0, 128); }).find("N >= 1") != std::string::npos);
  // Wrong element count.
  CHECK(error_text([&] { quantize_w4a16("count", 2, 128, w); }).find("count") != std::string::npos);
  // Non-finite input.
  std::vector<float> bad(128, 1.0f);
  bad[5] = NAN;
  CHECK(error_text([&] { quantize_w4a16("nan", 1, 128, bad); }).find("non-finite") != std::string::npos);
}

TEST_CASE("storage that disagrees with the shape fails validation") {
  QuantMatrix m = w4a16_zeros("x", 4, 256);
  m.scales.pop_back();
  CHECK(error_text([&] { m.validate(); }).find("x: w4a16-nk-g128 storage does not match") != std::string::npos);
}

TEST_CASE("synthetic weights are deterministic per seed and name, and well scaled") {
  QuantMatrix a = synthetic_w4a16("ffn.gate_up", 64, 256, 42);
  QuantMatrix b = synthetic_w4a16("ffn.gate_up", 64, 256, 42);
  QuantMatrix c = synthetic_w4a16("ffn.gate_up", 64, 256, 43);
  QuantMatrix d = synthetic_w4a16("ffn.down", 64, 256, 42);
  CHECK(a.qweight == b.qweight);
  CHECK(a.scales == b.scales);
  CHECK(a.qweight != c.qweight);
  CHECK(a.qweight != d.qweight);
  // Codes cover 0..15 and a row dotted with inputs of unit spread has spread near 1.
  std::vector<int> seen(16, 0);
  QuantView v = a.view();
  for (uint32_t col = 0; col < 256; ++col) seen[v.code(0, col)]++;
  for (int count : seen) CHECK(count > 0);
  double sum_sq = 0;
  for (uint32_t r = 0; r < 64; ++r)
    for (uint32_t col = 0; col < 256; ++col) sum_sq += v.value(r, col) * v.value(r, col);
  const double row_norm = std::sqrt(sum_sq / 64);  // |w_row|: y's spread for unit-variance x
  CHECK(row_norm > 0.6);
  CHECK(row_norm < 1.6);
  // Stacks: each matrix differs.
  QuantMatrix s = synthetic_w4a16("ffn.experts.down", 8, 128, 1, 3);
  CHECK(s.qweight.size() == 3 * 8 * 16);
  CHECK(s.view(0).qweight[0] != s.view(1).qweight[0]);
  CHECK(error_text([&] { (void)s.view(3); }).find("stack of 3") != std::string::npos);
}
