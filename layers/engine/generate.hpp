// SPDX-License-Identifier: MIT OR Apache-2.0
// Greedy decoding with a DecoderModel (docs/layers.md, "Generating"): every prompt prefilled into
// its own sequence of a KV cache (in chunks, each a batch of its own), then one batched decode
// step per new token for all sequences at once; each new id is the argmax of its logits (the
// first of equal maxima, as torch.argmax). No tokenizer: ids in, ids out.
#pragma once

#include "decoder/model.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace metrale::layers {

struct GenerateOptions {
  uint32_t max_new_tokens = 16;
  uint64_t kv_tokens = 0;       // the cache's capacity; 0: every prompt plus max_new_tokens each
  uint32_t block_size = 16;
  uint32_t prefill_chunk = 512; // prompt tokens per prefill batch
  bool prompt_logits = false;   // keep the logits of every prompt position
  // Told when a stage progresses: ("prefill sequence 2", 0.5).
  std::function<void(const std::string& stage, double fraction)> progress;
};

struct GenerateResult {
  std::vector<std::vector<int32_t>> generated;  // per prompt
  // bf16 logits as f32: [prompt][new token][vocab], the logits each new id was chosen from.
  std::vector<std::vector<float>> logits;
  // With prompt_logits: [prompt][position][vocab].
  std::vector<std::vector<float>> prompt_logits;
  uint64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  StatePoolShape cache;
};

// Error(invalid_argument) for an empty prompt or an id outside the vocabulary (naming it and its
// place), Error(out_of_memory) when the prompts and new tokens do not fit the cache (naming the
// tokens, the capacity and the block size), before anything runs.
GenerateResult generate_greedy(Backend& backend, DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                               const GenerateOptions& options);

}  // namespace metrale::layers
