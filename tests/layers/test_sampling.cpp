// SPDX-License-Identifier: MIT OR Apache-2.0
// The host sampler (layers/engine/sampling.hpp): greedy is the first argmax; a seeded draw is a
// pure function of (seed, draw); token frequencies over many draws on a tiny vocabulary pass a
// chi-square test against softmax(logits / temperature), after top-k and top-p, and the same test
// rejects the distributions a wrong sampler would draw from (no temperature, no top-k cut, an
// off-by-one in the cumulative sum).
#include <doctest/doctest.h>

#include "engine/sampling.hpp"

#include <metrale/status.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace metrale::layers;

namespace {

const std::vector<float> kLogits{1.0f, 2.5f, -0.5f, 2.0f, 0.0f, 1.5f, -1.0f, 0.5f};

// softmax(logits / t) over `keep` (indices), zero elsewhere.
std::vector<double> softmax_over(const std::vector<float>& logits, double t, const std::vector<int>& keep) {
  std::vector<double> p(logits.size(), 0.0);
  double total = 0;
  for (int i : keep) total += p[static_cast<size_t>(i)] = std::exp(logits[static_cast<size_t>(i)] / t);
  for (double& v : p) v /= total;
  return p;
}

std::vector<int> all_of(size_t n) {
  std::vector<int> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int>(i);
  return v;
}

std::vector<double> counts(const SamplingParams& params, int draws) {
  std::vector<double> c(kLogits.size(), 0.0);
  for (int d = 0; d < draws; ++d) c[static_cast<size_t>(sample_token(kLogits, params, static_cast<uint64_t>(d)))] += 1;
  return c;
}

// Pearson's statistic of `observed` against `expected` probabilities; a token observed where the
// expectation is 0 makes it infinite.
double chi_square(const std::vector<double>& observed, const std::vector<double>& expected) {
  double n = 0, x = 0;
  for (double o : observed) n += o;
  for (size_t i = 0; i < observed.size(); ++i) {
    if (expected[i] == 0) {
      if (observed[i] > 0) return INFINITY;
      continue;
    }
    const double e = n * expected[i];
    x += (observed[i] - e) * (observed[i] - e) / e;
  }
  return x;
}

// The chi-square critical values at p = 0.001 for 2..7 degrees of freedom.
double critical(size_t dof) {
  static const double table[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};
  return table[dof];
}

constexpr int kDraws = 40000;

}  // namespace

TEST_CASE("greedy sampling is the first of equal maxima") {
  CHECK(argmax(kLogits) == 1);
  const std::vector<float> ties{0.0f, 3.0f, 1.0f, 3.0f};
  CHECK(argmax(ties) == 1);
  CHECK(sample_token(ties, SamplingParams{}, 7) == 1);
}

TEST_CASE("greedy follows torch.argmax on NaN, infinities and signed zeros") {
  // Each expected index is what torch.argmax (torch 2.15) answers for the same row, f32 and bf16 alike.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK(argmax(std::vector<float>{1, nan, 3, nan}) == 1);
  CHECK(argmax(std::vector<float>{nan, 1, 5}) == 0);
  CHECK(argmax(std::vector<float>{nan, nan}) == 0);
  CHECK(argmax(std::vector<float>{inf, nan, inf}) == 1);
  CHECK(argmax(std::vector<float>{1, 2, inf, inf}) == 2);
  CHECK(argmax(std::vector<float>{-inf, -inf}) == 0);
  CHECK(argmax(std::vector<float>{-0.0f, 0.0f}) == 0);
  CHECK(argmax(std::vector<float>{0.0f, -0.0f}) == 0);
}

TEST_CASE("a draw depends on the sampling seed and the draw index only") {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  std::vector<int32_t> first, again, other;
  for (uint64_t d = 0; d < 64; ++d) {
    first.push_back(sample_token(kLogits, p, d));
    again.push_back(sample_token(kLogits, p, d));
  }
  p.seed = 43;
  for (uint64_t d = 0; d < 64; ++d) other.push_back(sample_token(kLogits, p, d));
  CHECK(first == again);
  CHECK(first != other);
  CHECK(sampling_uniform(1, 2) == sampling_uniform(1, 2));
  CHECK(sampling_uniform(1, 2) != sampling_uniform(2, 1));
}

TEST_CASE("token frequencies pass a chi-square test against softmax(logits / temperature)") {
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 7;
  const std::vector<double> observed = counts(p, kDraws);
  const std::vector<double> right = softmax_over(kLogits, 0.8, all_of(kLogits.size()));
  const double x = chi_square(observed, right);
  INFO("chi-square " << x);
  CHECK(x < critical(7));
  // The test has power: the distribution without the temperature is rejected.
  CHECK(chi_square(observed, softmax_over(kLogits, 1.0, all_of(kLogits.size()))) > critical(7));
}

TEST_CASE("top-k keeps the k most likely tokens, renormalised") {
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 3;
  p.seed = 11;
  const std::vector<double> observed = counts(p, kDraws);
  const double x = chi_square(observed, softmax_over(kLogits, 1.5, {1, 3, 5}));
  INFO("chi-square " << x);
  CHECK(x < critical(2));
  CHECK(chi_square(observed, softmax_over(kLogits, 1.5, all_of(kLogits.size()))) > critical(7));  // no cut
  CHECK(chi_square(observed, softmax_over(kLogits, 1.5, {1, 3})) == INFINITY);  // an off-by-one cut would miss token 5
}

TEST_CASE("top-p keeps the smallest set of the most likely tokens that reaches p") {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.7f;
  p.seed = 5;
  // softmax(kLogits): token 1 0.401, token 3 0.243, token 5 0.147, ...: 1 and 3 sum to 0.644 < 0.7,
  // with 5 to 0.791: three tokens kept.
  const std::vector<double> full = softmax_over(kLogits, 1.0, all_of(kLogits.size()));
  REQUIRE(full[1] + full[3] < 0.7);
  REQUIRE(full[1] + full[3] + full[5] >= 0.7);
  const std::vector<double> observed = counts(p, kDraws);
  const double x = chi_square(observed, softmax_over(kLogits, 1.0, {1, 3, 5}));
  INFO("chi-square " << x);
  CHECK(x < critical(2));
  CHECK(chi_square(observed, softmax_over(kLogits, 1.0, {1, 3})) == INFINITY);
  CHECK(chi_square(observed, softmax_over(kLogits, 1.0, {1, 3, 5, 0})) > critical(3));
}

TEST_CASE("bad sampling parameters are refused naming the field") {
  SamplingParams p;
  p.temperature = -1.0f;
  CHECK_THROWS_WITH_AS(p.validate(), doctest::Contains("temperature"), metrale::Error);
  p.temperature = 1.0f;
  p.top_p = 0.0f;
  CHECK_THROWS_WITH_AS(p.validate(), doctest::Contains("top_p"), metrale::Error);
  p.top_p = 1.5f;
  CHECK_THROWS_AS(sample_token(kLogits, p, 0), metrale::Error);
  CHECK(SamplingParams{}.describe() == "greedy");
}
