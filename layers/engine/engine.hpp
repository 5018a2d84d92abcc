// SPDX-License-Identifier: MIT OR Apache-2.0
// The engine loop: requests in, tokens out, one model forward per step (docs/layers.md, "The
// engine"). Continuous batching as servers do it: a request is admitted when its step has come
// and the state pool can reserve its tokens (prompt plus new tokens), joins the running batch,
// and retires when it has its tokens, its state freed; a step's rows are every running decode
// first, then prefill chunks of the admitted prompts (at most prefill_chunk tokens of one prompt)
// in what is left of the token budget, so prompts and decodes share steps (as vLLM schedules).
// Greedy tokens are chosen on the backend by sample/argmax (a try lookup, audited) when every row
// choosing one in a step is greedy and keeps no logits: only the ids are copied back. Otherwise
// engine/sampling.hpp chooses them on the host from the logits of those rows, copied for them only.
// A request with speculation (engine/speculation.hpp) feeds its last token and its drafter's
// proposals as one decode-shaped run, keeps the drafts its own argmax agrees with plus the next
// token, and rolls its state back past the rest: the ids are those of plain greedy decoding.
// One owner, not thread-safe. The backend, the model and the pool must outlive the engine.
#pragma once

#include "core/device_buffer.hpp"
#include "decoder/model.hpp"
#include "engine/sampling.hpp"
#include "engine/speculation.hpp"
#include "state/sequence_batch.hpp"
#include "state/state_pool.hpp"

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <vector>

namespace metrale::layers {

struct EngineRequest {
  std::vector<int32_t> prompt;
  uint32_t max_new_tokens = 16;
  SamplingParams sampling;         // greedy by default
  uint64_t arrival_step = 0;       // not admitted before this step
  bool keep_logits = false;        // keep the logits each new token was chosen from
  bool keep_prompt_logits = false; // keep the logits of every prompt position
  SpeculationParams speculation;   // none by default; greedy requests only
};

struct EngineOptions {
  uint32_t token_budget = 512;   // rows per step: the running decodes, then prefill chunks
  uint32_t prefill_chunk = 512;  // prompt tokens of one sequence per step, at most
};

// What became of a request.
struct Completion {
  std::vector<int32_t> generated;
  std::vector<float> logits;         // with keep_logits: bf16 logits as f32 [new token][vocab]
  std::vector<float> prompt_logits;  // with keep_prompt_logits: [prompt position][vocab]
  // With speculation: one entry per verification (a decode step with drafts), in order, each the
  // ids proposed at that step.
  std::vector<std::vector<int32_t>> drafts;
  uint64_t admitted_step = 0, finished_step = 0;
  bool finished = false;
};

struct EngineStats {
  uint64_t steps = 0;
  uint64_t prefill_tokens = 0;
  uint64_t decode_tokens = 0;  // tokens chosen by decode rows (with speculation, fewer than the rows)
  uint64_t decode_rows = 0;    // rows fed for decodes: each one's last token, drafts, tokens fed again
  // A step's time counts as prefill when it has prompt rows, as decode otherwise.
  double prefill_seconds = 0, decode_seconds = 0;
  uint64_t logit_rows_copied = 0;      // rows of logits copied to the host
  uint64_t ids_chosen_on_backend = 0;  // tokens chosen by sample/argmax (only the ids copied)
  // Speculation: decode steps with drafts, drafts proposed, drafts accepted, tokens fed again
  // after a recurrent state's rollback.
  uint64_t verifications = 0, drafted_tokens = 0, accepted_tokens = 0, replayed_tokens = 0;
};

class Engine {
 public:
  Engine(Backend& backend, DecoderModel& model, StatePool& pool, const EngineOptions& options = {});

  // Queues a request; its id (0, 1, ... in submission order). Error(invalid_argument) for an empty
  // prompt, an id outside the vocabulary, 0 new tokens, bad sampling or speculation parameters,
  // or speculation with sampling;
  // Error(out_of_memory) for a request the pool could not hold even alone (naming the tokens,
  // the blocks and block_size, and the pool's blocks). Nothing runs here.
  uint32_t submit(EngineRequest request);
  // One step: admissions, one forward of the step's rows, the chosen tokens, retirements. A step
  // with nothing running and the next arrival later moves to that arrival's step. False when
  // every request has finished (nothing ran).
  bool step();
  // Steps until every request has finished.
  void run();

  const Completion& completion(uint32_t id) const;
  const EngineRequest& request(uint32_t id) const;
  uint32_t requests() const noexcept { return static_cast<uint32_t>(requests_.size()); }
  uint64_t current_step() const noexcept { return step_; }
  const EngineStats& stats() const noexcept { return stats_; }
  // Whether the backend serves sample/argmax (resolved once, at construction).
  bool argmax_on_backend() const noexcept { return static_cast<bool>(argmax_); }
  // Told after each step: (tokens generated so far, tokens all requests will have generated).
  std::function<void(uint64_t, uint64_t)> progress;

 private:
  struct Running {
    uint32_t id = 0;
    uint32_t sequence = 0;
    uint32_t prefilled = 0;       // prompt tokens fed so far
    std::vector<int32_t> tokens;  // prompt and generated tokens; those past the pool's length are fed next
    std::shared_ptr<Drafter> drafter;  // null: no speculation
    std::vector<int32_t> drafts;  // this step's
  };
  // One row of the step's batch that chooses a token or keeps prompt logits.
  struct WantedRow {
    size_t running = 0;    // index in running_
    uint32_t row = 0;      // row of the batch
    bool chooses = false;  // a decode row or a prompt's last row
    bool prompt = false;   // a prompt position (its logits kept)
    uint32_t draft = 0;    // a decode row's place among its run's choosing rows (draft j checked at row j)
  };
  // A step's batch: every running decode, then prefill chunks in the budget left.
  struct StepRows {
    std::vector<SequenceRows> runs;
    std::vector<int32_t> ids, positions;
    std::vector<WantedRow> wanted;
    uint64_t decode_rows = 0, prefill_rows = 0;
  };
  void admit();
  StepRows schedule();
  // The decode runs: each sequence's tokens not yet fed (its last, and those to feed again after a
  // rollback), then drafts in what is left of the budget; returns the budget left.
  uint64_t schedule_decodes(StepRows& out);
  // After a verification: its drafts recorded, the state rolled back past the rejected ones.
  void finish_verification(Running& r, uint32_t emitted);
  // Whether this step's tokens can be chosen by sample/argmax: it resolved, and every wanted row
  // chooses a token for a greedy request that keeps no logits.
  bool backend_chooses(std::span<const WantedRow> wanted) const;
  static std::vector<uint32_t> batch_rows(std::span<const WantedRow> wanted);  // their rows of the batch
  // The wanted rows' logits as f32, copied to the host.
  std::vector<float> host_logits(DevicePtr hidden, uint32_t hidden_rows, std::span<const WantedRow> wanted);
  // The wanted rows' greedy ids, chosen by sample/argmax on the backend.
  std::vector<int32_t> backend_ids(DevicePtr hidden, uint32_t hidden_rows, std::span<const WantedRow> wanted);
  // The tokens of the rows that choose one (`ids` when the backend chose them, else from
  // `logits`); retires the requests that have all theirs.
  void choose_tokens(std::span<const WantedRow> wanted, std::span<const float> logits, std::span<const int32_t> ids);

  Backend* backend_;
  DecoderModel* model_;
  StatePool* pool_;
  EngineOptions options_;
  KernelHandle argmax_;   // sample/argmax, null when the backend does not serve it
  DeviceBuffer chosen_;   // its i32 output, one per row
  std::vector<EngineRequest> requests_;
  std::vector<Completion> completions_;
  std::deque<uint32_t> waiting_;  // submission order
  std::vector<Running> running_;  // admission order
  uint64_t step_ = 0;
  uint64_t generated_ = 0, expected_ = 0;
  EngineStats stats_;
};

// sample/argmax tried (not required) on `backend`, as the engine resolves it: the null handle when
// the backend does not serve it; the audit row names `site`.
KernelHandle try_argmax_kernel(Backend& backend, std::source_location site = std::source_location::current());

// Blocks of `block_size` a request of `prompt` tokens and `max_new_tokens` new ones reserves (its
// last token is never fed back).
uint64_t request_blocks(uint64_t prompt, uint32_t max_new_tokens, uint32_t block_size) noexcept;

}  // namespace metrale::layers
