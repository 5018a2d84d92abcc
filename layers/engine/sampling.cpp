// SPDX-License-Identifier: MIT OR Apache-2.0
#include "engine/sampling.hpp"

#include "core/rng.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace metrale::layers {

void SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0) {
    throw Error(Status::invalid_argument, "sampling: temperature " + std::to_string(temperature) +
                                              " must be 0 (greedy) or a positive number");
  }
  if (!(top_p > 0 && top_p <= 1)) {
    throw Error(Status::invalid_argument, "sampling: top_p " + std::to_string(top_p) + " must be in (0, 1]");
  }
}

std::string SamplingParams::describe() const {
  if (greedy()) return "greedy";
  char text[160];
  std::snprintf(text, sizeof text, "temperature %g, top_k %u, top_p %g, seed %llu", static_cast<double>(temperature), top_k,
                static_cast<double>(top_p), static_cast<unsigned long long>(seed));
  return text;
}

int32_t argmax(std::span<const float> logits) noexcept {
  // torch.argmax's order, which sample/argmax follows too: NaN above every number, the first wins.
  size_t best = 0;
  for (size_t j = 1; j < logits.size() && !std::isnan(logits[best]); ++j)
    if (logits[j] > logits[best] || std::isnan(logits[j])) best = j;
  return static_cast<int32_t>(best);
}

double sampling_uniform(uint64_t seed, uint64_t draw) noexcept {
  SplitMix64 mix(seed ^ (draw * 0xd1b54a32d192ed03ull));
  mix.next();
  return mix.uniform();
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, uint64_t draw) {
  p.validate();
  if (logits.empty()) throw Error(Status::invalid_argument, "sampling: an empty row of logits");
  if (p.greedy()) return argmax(logits);
  // Candidates by logit, largest first (ties: the lower id first, as a stable sort keeps them).
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
  size_t kept = order.size();
  if (p.top_k > 0) kept = std::min<size_t>(kept, p.top_k);
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  const double top = static_cast<double>(logits[static_cast<size_t>(order[0])]) * inv_t;
  std::vector<double> weight(kept);
  double total = 0;
  for (size_t i = 0; i < kept; ++i) {
    weight[i] = std::exp(static_cast<double>(logits[static_cast<size_t>(order[i])]) * inv_t - top);
    total += weight[i];
  }
  if (p.top_p < 1) {
    // The smallest prefix whose probability reaches top_p (at least one token).
    double cumulative = 0;
    size_t n = 0;
    while (n < kept) {
      cumulative += weight[n] / total;
      ++n;
      if (cumulative >= static_cast<double>(p.top_p)) break;
    }
    kept = n;
    total = std::accumulate(weight.begin(), weight.begin() + static_cast<std::ptrdiff_t>(kept), 0.0);
  }
  const double u = sampling_uniform(p.seed, draw) * total;
  double cumulative = 0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += weight[i];
    if (u < cumulative) return order[i];
  }
  return order[kept - 1];  // u within rounding of the total
}

}  // namespace metrale::layers
