// SPDX-License-Identifier: MIT OR Apache-2.0
// Generation from token ids with a DecoderModel (docs/layers.md, "Generating"): each prompt a
// request of the engine loop (engine/engine.hpp) - admitted at its arrival step when the cache can
// reserve its tokens, prefilled in chunks that share steps with the running decodes, retired when
// it has its tokens. Tokens are greedy (the argmax, the first of equal maxima as torch.argmax)
// or sampled (engine/sampling.hpp). No tokenizer: ids in, ids out.
#pragma once

#include "decoder/model.hpp"
#include "engine/engine.hpp"
#include "engine/sampling.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace metrale::layers {

struct GenerateOptions {
  uint32_t max_new_tokens = 16;
  uint64_t kv_tokens = 0;       // the cache's capacity; 0: every prompt plus max_new_tokens each
  uint32_t block_size = 16;
  uint32_t prefill_chunk = 512; // prompt tokens of one sequence per step
  uint32_t token_budget = 0;    // rows per step (decodes first); 0: prefill_chunk plus one per prompt
  std::vector<uint64_t> arrival_steps;  // per prompt, the step it arrives at; empty: all at step 0
  SamplingParams sampling;      // every prompt's; greedy by default
  SpeculationParams speculation;  // every prompt's; none by default (greedy only)
  bool prompt_logits = false;   // keep the logits of every prompt position
  // Keep the logits each new id was chosen from. Without them (and greedy), the backend's
  // sample/argmax chooses where it has one, and only the ids come back.
  bool keep_logits = true;
  // Told as tokens are generated: ("generate", fraction of all new tokens).
  std::function<void(const std::string& stage, double fraction)> progress;
};

struct GenerateResult {
  std::vector<std::vector<int32_t>> generated;  // per prompt
  // bf16 logits as f32: [prompt][new token][vocab], the logits each new id was chosen from
  // (with keep_logits; else empty).
  std::vector<std::vector<float>> logits;
  // With prompt_logits: [prompt][position][vocab].
  std::vector<std::vector<float>> prompt_logits;
  std::vector<uint64_t> admitted_step, finished_step;  // per prompt
  // Per prompt, with speculation: the ids proposed at each verification, in order.
  std::vector<std::vector<std::vector<int32_t>>> drafts;
  EngineStats stats;  // the engine's: steps, tokens, seconds, where the ids were chosen
  StatePoolShape cache;
};

// Error(invalid_argument) for an empty prompt or an id outside the vocabulary (naming it and its
// place), for arrival_steps not one per prompt; Error(out_of_memory) when a prompt and its new
// tokens do not fit the cache even alone (naming the tokens, the capacity and the block size),
// before anything runs.
GenerateResult generate_tokens(Backend& backend, DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                               const GenerateOptions& options);

}  // namespace metrale::layers
