// SPDX-License-Identifier: MIT OR Apache-2.0
// Speculative decoding's per-request settings and its drafters (docs/layers.md, "Speculative
// decoding"). A drafter proposes up to K tokens to follow a sequence; the engine feeds the
// sequence's last token and the drafts as one decode-shaped run (state/sequence_batch.hpp: each
// row computed as a decode step would compute it), keeps the longest prefix of drafts equal to the
// target's argmax at each position plus the target's next token, and rolls every layer's state
// back past the rejected drafts (StatePool::rollback; a recurrent state to its checkpoint, the
// kept tokens fed again). Greedy only: the acceptance rule for sampling is not built.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

enum class SpeculationMethod { none, ngram };

class Drafter;

struct SpeculationParams {
  SpeculationMethod method = SpeculationMethod::none;
  uint32_t draft_tokens = 4;  // K: drafts proposed per verification, at most
  // Prompt lookup: the longest n-gram tried first, down to the shortest.
  uint32_t ngram_max = 3, ngram_min = 1;
  // A drafter of the caller's (the tests'; MTP later), used whatever `method` when set.
  std::shared_ptr<Drafter> drafter;
  bool enabled() const noexcept { return (drafter || method != SpeculationMethod::none) && draft_tokens > 0; }
  // Error(invalid_argument) for draft_tokens above kMaxDraftTokens or an n-gram range not 1 <= min <= max.
  void validate() const;
  // "none", or e.g. "ngram (3..1), 4 draft tokens".
  std::string describe() const;
  static constexpr uint32_t kMaxDraftTokens = 64;
};

// "none" or "ngram"; Error(invalid_argument) naming the choices otherwise.
SpeculationMethod parse_speculation_method(std::string_view name);
std::string_view speculation_method_name(SpeculationMethod method) noexcept;

// Proposes the tokens to follow `context` (the sequence so far: prompt and generated tokens).
class Drafter {
 public:
  virtual ~Drafter() = default;
  // At most `max_tokens` ids; none: no proposal (a plain decode step).
  virtual std::vector<int32_t> propose(std::span<const int32_t> context, uint32_t max_tokens) = 0;
};

// Prompt lookup: for n from ngram_max down to ngram_min, the latest earlier place where the last
// n tokens of `context` occur, and up to `max_tokens` of the tokens that followed it there.
std::vector<int32_t> ngram_lookup(std::span<const int32_t> context, uint32_t max_tokens, uint32_t ngram_max,
                                  uint32_t ngram_min);

// The request's drafter (params.drafter when set); null for none.
std::shared_ptr<Drafter> make_drafter(const SpeculationParams& params);

}  // namespace metrale::layers
