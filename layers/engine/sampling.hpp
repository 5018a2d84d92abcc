// SPDX-License-Identifier: MIT OR Apache-2.0
// Choosing a token from one row of logits, on the host: greedy (the argmax, the first of equal
// maxima as torch.argmax) or sampled with temperature, top-k and top-p, in transformers' order
// (logits / temperature, keep the k largest, keep the smallest set of the largest whose
// probabilities sum to at least top_p, softmax over what is kept, one draw). A draw is a pure
// function of (seed, draw index): a request's tokens do not depend on what it was batched with.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace metrale::layers {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy; > 0: sample from softmax(logits / temperature)
  uint32_t top_k = 0;        // 0: every token
  float top_p = 1.0f;        // in (0, 1]; 1: no nucleus cut
  uint64_t seed = 0;

  bool greedy() const noexcept { return temperature == 0.0f; }
  // Error(invalid_argument) naming the field for a negative or non-finite temperature or a top_p
  // outside (0, 1].
  void validate() const;
  std::string describe() const;  // "greedy" or "temperature 0.7, top_k 40, top_p 0.9, seed 1"
};

// The first index of the largest value, as torch.argmax: NaN counts above every number (the
// first NaN's index); 0 for an empty row.
int32_t argmax(std::span<const float> logits) noexcept;

// The token for draw `draw` (the request's n-th sampled token) of `logits` under `params`.
int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t draw);

// The uniform number in [0, 1) draw `draw` of `seed` uses (SplitMix64 of both).
double sampling_uniform(uint64_t seed, uint64_t draw) noexcept;

}  // namespace metrale::layers
