// SPDX-License-Identifier: MIT OR Apache-2.0
#include "engine/engine.hpp"

#include "core/launch_shape.hpp"
#include "core/lookup_notes.hpp"
#include "core/numeric.hpp"
#include "state/sequence_batch.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/status.hpp>

#include <algorithm>
#include <chrono>

namespace metrale::layers {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kEngineArgmaxSig = catalogue::signature("sample", "argmax");
constexpr uint32_t kEngineArgmaxBlock = 256;  // one block per row; argmax takes any 1-D block (docs/kernels.md)

uint64_t request_tokens(uint64_t prompt, uint32_t max_new_tokens) noexcept { return prompt + max_new_tokens - 1; }

}  // namespace

KernelHandle try_argmax_kernel(Backend& backend, std::source_location site) {
  return backend.lookup("sample", "argmax", plain_request(LookupKind::try_lookup, kEngineArgmaxSig), site);
}

uint64_t request_blocks(uint64_t prompt, uint32_t max_new_tokens, uint32_t block_size) noexcept {
  return (request_tokens(prompt, max_new_tokens) + block_size - 1) / block_size;
}

Engine::Engine(Backend& backend, DecoderModel& model, StatePool& pool, const EngineOptions& options)
    : backend_(&backend), model_(&model), pool_(&pool), options_(options) {
  if (options.token_budget == 0) throw Error(Status::invalid_argument, "engine: token_budget must be at least 1");
  if (options.prefill_chunk == 0) throw Error(Status::invalid_argument, "engine: prefill_chunk must be at least 1");
  // Tried, not required: without it greedy tokens are chosen on the host; the audit row says which.
  argmax_ = try_argmax_kernel(backend);
}

uint32_t Engine::submit(EngineRequest r) {
  const auto id = static_cast<uint32_t>(requests_.size());
  const std::string name = "request " + std::to_string(id);
  const uint32_t vocab = model_->config().vocab_size;
  if (r.prompt.empty()) throw Error(Status::invalid_argument, name + ": the prompt is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    const int32_t t = r.prompt[i];
    if (t < 0 || static_cast<uint32_t>(t) >= vocab) {
      throw Error(Status::invalid_argument, name + ": prompt position " + std::to_string(i) + ": id " + std::to_string(t) +
                                                " is outside the vocabulary (0.." + std::to_string(vocab - 1) + ")");
    }
  }
  if (r.max_new_tokens == 0) throw Error(Status::invalid_argument, name + ": max_new_tokens must be at least 1");
  r.sampling.validate();
  r.speculation.validate();
  if (r.speculation.enabled() && !r.sampling.greedy()) {
    throw Error(Status::invalid_argument, name + ": speculation (" + r.speculation.describe() + ") with sampling (" +
                                              r.sampling.describe() + "): only greedy requests speculate");
  }
  const StatePoolShape& shape = pool_->shape();
  const uint64_t blocks = request_blocks(r.prompt.size(), r.max_new_tokens, shape.block_size);
  if (blocks > shape.num_blocks) {
    throw Error(Status::out_of_memory, name + ": a prompt of " + std::to_string(r.prompt.size()) + " tokens and " +
                                           std::to_string(r.max_new_tokens) + " new tokens need " +
                                           std::to_string(request_tokens(r.prompt.size(), r.max_new_tokens)) + " tokens in " +
                                           std::to_string(blocks) + " blocks of " + std::to_string(shape.block_size) +
                                           ", but the KV cache holds " + std::to_string(shape.capacity_tokens()) + " tokens (" +
                                           std::to_string(shape.num_blocks) + " blocks)");
  }
  expected_ += r.max_new_tokens;
  requests_.push_back(std::move(r));
  completions_.emplace_back();
  waiting_.push_back(id);
  return id;
}

void Engine::admit() {
  // First come, first served: a request the pool cannot reserve yet holds back those after it.
  while (!waiting_.empty() && requests_[waiting_.front()].arrival_step <= step_) {
    const uint32_t id = waiting_.front();
    const EngineRequest& r = requests_[id];
    const uint64_t tokens = request_tokens(r.prompt.size(), r.max_new_tokens);
    if (request_blocks(r.prompt.size(), r.max_new_tokens, pool_->shape().block_size) > pool_->free_blocks()) return;
    Running run;
    run.id = id;
    run.sequence = pool_->add_sequence(static_cast<uint32_t>(tokens));
    run.tokens = r.prompt;
    run.drafter = make_drafter(r.speculation);
    running_.push_back(std::move(run));
    completions_[id].admitted_step = step_;
    waiting_.pop_front();
  }
}

uint64_t Engine::schedule_decodes(StepRows& out) {
  // Every decode's tokens not yet fed first (one, or more after a rollback), then drafts.
  uint64_t budget = options_.token_budget;
  for (const Running& r : running_) {
    if (r.prefilled < requests_[r.id].prompt.size()) continue;
    const uint64_t fed = r.tokens.size() - pool_->length(r.sequence);
    budget = budget > fed ? budget - fed : 0;
  }
  for (size_t i = 0; i < running_.size(); ++i) {
    Running& r = running_[i];
    const EngineRequest& q = requests_[r.id];
    r.drafts.clear();
    if (r.prefilled < q.prompt.size()) continue;
    const uint32_t length = pool_->length(r.sequence);
    // k drafts and the next token: at most the tokens still to come (so the reservation holds).
    const uint64_t left = q.max_new_tokens - completions_[r.id].generated.size() - 1;
    const auto k = static_cast<uint32_t>(std::min<uint64_t>({q.speculation.draft_tokens, left, budget}));
    if (r.drafter && k > 0) r.drafts = r.drafter->propose(r.tokens, k);
    if (!r.drafts.empty()) pool_->checkpoint(r.sequence);  // what a recurrent state's rollback returns to
    budget -= r.drafts.size();
    const auto feed = static_cast<uint32_t>(r.tokens.size() - length);
    const auto rows = static_cast<uint32_t>(feed + r.drafts.size());
    for (uint32_t j = 0; j < rows; ++j) {
      // The last token's row chooses (it checks draft 0), and each draft's row the next.
      if (j + 1 >= feed) out.wanted.push_back({i, static_cast<uint32_t>(out.ids.size()), true, false, j + 1 - feed});
      out.ids.push_back(j < feed ? r.tokens[length + j] : r.drafts[j - feed]);
      out.positions.push_back(static_cast<int32_t>(length + j));
    }
    out.runs.push_back({r.sequence, rows, true});
    out.decode_rows += rows;
    stats_.replayed_tokens += feed - 1;
  }
  return budget;
}

Engine::StepRows Engine::schedule() {
  // The step's rows: every decode (decode-shaped), then prefill chunks in the budget left.
  StepRows out;
  uint64_t budget = schedule_decodes(out);
  auto& [runs, ids, positions, wanted, decode_rows, prefill_rows] = out;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Running& r = running_[i];
    const EngineRequest& q = requests_[r.id];
    if (r.prefilled >= q.prompt.size()) continue;
    const auto rows = static_cast<uint32_t>(std::min<uint64_t>({options_.prefill_chunk, q.prompt.size() - r.prefilled, budget}));
    const bool last = r.prefilled + rows == q.prompt.size();
    for (uint32_t k = 0; k < rows; ++k) {
      const bool chooses = last && k + 1 == rows;
      if (q.keep_prompt_logits || chooses) wanted.push_back({i, static_cast<uint32_t>(ids.size()), chooses, true});
      ids.push_back(q.prompt[r.prefilled + k]);
      positions.push_back(static_cast<int32_t>(r.prefilled + k));
    }
    runs.push_back({r.sequence, rows});
    r.prefilled += rows;
    prefill_rows += rows;
    budget -= rows;
  }
  return out;
}

bool Engine::step() {
  if (running_.empty()) {
    if (waiting_.empty()) return false;
    step_ = std::max(step_, requests_[waiting_.front()].arrival_step);  // idle until the next arrival
  }
  admit();
  if (running_.empty()) {
    throw Error(Status::internal, "engine: request " + std::to_string(waiting_.front()) +
                                      " cannot be admitted into an empty pool");  // submit() rules this out
  }
  const auto start = Clock::now();
  const StepRows rows = schedule();
  const SequenceBatch batch(*backend_, *pool_, rows.runs, rows.positions);
  const DevicePtr hidden = model_->forward(batch, rows.ids);
  const std::vector<WantedRow>& wanted = rows.wanted;
  std::vector<float> logits;
  std::vector<int32_t> ids;
  if (backend_chooses(wanted)) {
    ids = backend_ids(hidden, batch.rows(), wanted);
  } else if (!wanted.empty()) {
    logits = host_logits(hidden, batch.rows(), wanted);
  }
  choose_tokens(wanted, logits, ids);

  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  (rows.prefill_rows > 0 ? stats_.prefill_seconds : stats_.decode_seconds) += seconds;
  stats_.prefill_tokens += rows.prefill_rows;
  stats_.decode_rows += rows.decode_rows;
  ++stats_.steps;
  ++step_;
  if (progress) progress(generated_, expected_);
  return true;
}

bool Engine::backend_chooses(std::span<const WantedRow> wanted) const {
  if (!argmax_ || wanted.empty()) return false;
  return std::all_of(wanted.begin(), wanted.end(), [&](const WantedRow& w) {
    const EngineRequest& q = requests_[running_[w.running].id];
    return w.chooses && q.sampling.greedy() && !q.keep_logits && !q.keep_prompt_logits;
  });
}

std::vector<uint32_t> Engine::batch_rows(std::span<const WantedRow> wanted) {
  std::vector<uint32_t> out;
  out.reserve(wanted.size());
  for (const WantedRow& w : wanted) out.push_back(w.row);
  return out;
}

std::vector<float> Engine::host_logits(DevicePtr hidden, uint32_t hidden_rows, std::span<const WantedRow> wanted) {
  const std::vector<uint32_t> rows = batch_rows(wanted);
  std::vector<uint16_t> bits(rows.size() * size_t{model_->config().vocab_size});
  backend_->copy_to_host(bits.data(), model_->logits(hidden, hidden_rows, rows), bits.size() * kBf16);
  backend_->synchronize();
  std::vector<float> logits(bits.size());
  bf16_to_f32(bits, logits);
  stats_.logit_rows_copied += rows.size();
  return logits;
}

std::vector<int32_t> Engine::backend_ids(DevicePtr hidden, uint32_t hidden_rows, std::span<const WantedRow> wanted) {
  const std::vector<uint32_t> rows = batch_rows(wanted);
  const auto m = static_cast<uint32_t>(rows.size());
  const uint32_t vocab = model_->config().vocab_size;
  const DevicePtr logits = model_->logits(hidden, hidden_rows, rows);
  chosen_.ensure(*backend_, size_t{m} * sizeof(int32_t));
  backend_->launch(argmax_, launch_shape({m, 1, 1}, kEngineArgmaxBlock, 0), logits, chosen_.ptr(), m, vocab);
  std::vector<int32_t> ids = chosen_.download<int32_t>(m);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || static_cast<uint32_t>(ids[i]) >= vocab) {  // a wrong id would reach the next step's embedding
      throw Error(Status::internal, "engine: sample/argmax on backend '" + backend_->name() + "' chose id " +
                                        std::to_string(ids[i]) + " for row " + std::to_string(rows[i]) +
                                        ", outside the vocabulary (0.." + std::to_string(vocab - 1) + ")");
    }
  }
  stats_.ids_chosen_on_backend += m;
  return ids;
}

void Engine::choose_tokens(std::span<const WantedRow> wanted, std::span<const float> logits, std::span<const int32_t> ids) {
  const uint32_t vocab = model_->config().vocab_size;
  const bool on_host = ids.empty();
  // Per running sequence: the tokens its decode rows chose that it keeps, and whether its run is
  // still accepting (a draft equal to the token chosen before it keeps the next row's choice).
  std::vector<uint32_t> emitted(running_.size(), 0);
  std::vector<bool> open(running_.size(), true);
  for (size_t w = 0; w < wanted.size(); ++w) {
    const size_t i = wanted[w].running;
    Running& r = running_[i];
    const EngineRequest& q = requests_[r.id];
    Completion& c = completions_[r.id];
    const std::span<const float> row = on_host ? logits.subspan(w * vocab, vocab) : std::span<const float>{};
    if (wanted[w].prompt && q.keep_prompt_logits) c.prompt_logits.insert(c.prompt_logits.end(), row.begin(), row.end());
    if (!wanted[w].chooses || !open[i] || c.generated.size() == q.max_new_tokens) continue;
    const int32_t token = on_host ? sample_token(row, q.sampling, c.generated.size()) : ids[w];
    c.generated.push_back(token);
    r.tokens.push_back(token);
    if (q.keep_logits) c.logits.insert(c.logits.end(), row.begin(), row.end());
    ++generated_;
    if (!wanted[w].prompt) ++stats_.decode_tokens, ++emitted[i];
    const uint32_t j = wanted[w].draft;  // the token chosen at row j; draft j is accepted when equal
    open[i] = j < r.drafts.size() && r.drafts[j] == token;
  }
  std::vector<size_t> retired;
  for (size_t i = 0; i < running_.size(); ++i) {
    Running& r = running_[i];
    Completion& c = completions_[r.id];
    if (!r.drafts.empty()) finish_verification(r, emitted[i]);
    if (c.finished || c.generated.size() < requests_[r.id].max_new_tokens) continue;
    c.finished = true;
    c.finished_step = step_;
    pool_->release(r.sequence);
    retired.push_back(i);
  }
  std::sort(retired.begin(), retired.end(), std::greater<>());
  for (size_t i : retired) running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
}

void Engine::finish_verification(Running& r, uint32_t emitted) {
  // `emitted` tokens kept: emitted - 1 drafts accepted and the token after them. The fed tokens
  // past the kept ones (the rejected drafts) are forgotten: KV exactly; a recurrent state returns
  // to its checkpoint, and the kept tokens after it are fed again at the next step.
  const auto drafts = static_cast<uint32_t>(r.drafts.size());
  const uint32_t accepted = emitted - 1;
  completions_[r.id].drafts.push_back(r.drafts);
  ++stats_.verifications;
  stats_.drafted_tokens += drafts;
  stats_.accepted_tokens += accepted;
  if (accepted < drafts) pool_->rollback(r.sequence, drafts - accepted);
  r.drafts.clear();
}

void Engine::run() {
  while (step()) {
  }
}

const Completion& Engine::completion(uint32_t id) const {
  if (id >= completions_.size()) throw Error(Status::invalid_argument, "engine: no request " + std::to_string(id));
  return completions_[id];
}

const EngineRequest& Engine::request(uint32_t id) const {
  if (id >= requests_.size()) throw Error(Status::invalid_argument, "engine: no request " + std::to_string(id));
  return requests_[id];
}

}  // namespace metrale::layers
