// SPDX-License-Identifier: MIT OR Apache-2.0
// Speculative decoding's pieces on the CPU backend (docs/layers.md, "Speculative decoding"), on
// the tiny-qwen3 and tiny-qwen3.5 (hybrid) presets: a decode-shaped run of k + 1 rows computes
// each row bit for bit as k + 1 successive decode steps (alone or sharing its batch with a decode
// and a prompt chunk); prompt lookup proposes what followed the latest earlier match; the engine
// with n-gram speculation, K = 1..4, gives bit for bit plain greedy decoding's ids and logits
// (batches of prompts of different lengths, chunked prefills beside verifications, requests with
// different K in one step; on tiny-qwen3 the greedy output repeats itself and drafts get
// accepted, tiny-qwen3.5's random weights do not repeat), and so does an oracle drafter whose
// drafts are accepted in full, in part or not at all (every rollback and DeltaNet replay).
#include <doctest/doctest.h>

#include "backend_support.hpp"
#include "compose.hpp"
#include "engine/engine.hpp"
#include "engine/speculation.hpp"
#include "state/sequence_batch.hpp"

#include <metrale/status.hpp>

using namespace metrale;
using namespace metrale::layers;

namespace {

using LogitRows = std::vector<std::vector<uint16_t>>;

// Feeds the runs' rows (`ids`, in run order) as one batch; every row's logits as bf16 bits.
LogitRows feed_rows(Backend& backend, DecoderModel& model, StatePool& pool, const std::vector<SequenceRows>& runs,
                    const std::vector<int32_t>& ids) {
  std::vector<int32_t> positions;
  for (const SequenceRows& r : runs) {
    for (uint32_t i = 0; i < r.rows; ++i) positions.push_back(static_cast<int32_t>(pool.length(r.sequence) + i));
  }
  const SequenceBatch batch(backend, pool, runs, positions);
  const DevicePtr hidden = model.forward(batch, ids);
  const uint32_t vocab = model.config().vocab_size;
  std::vector<uint32_t> rows(batch.rows());
  for (uint32_t i = 0; i < batch.rows(); ++i) rows[i] = i;
  std::vector<uint16_t> bits(size_t{batch.rows()} * vocab);
  backend.copy_to_host(bits.data(), model.logits(hidden, batch.rows(), rows), bits.size() * 2);
  backend.synchronize();
  LogitRows out;
  for (uint32_t i = 0; i < batch.rows(); ++i) out.emplace_back(bits.begin() + size_t{i} * vocab, bits.begin() + size_t{i + 1} * vocab);
  return out;
}

std::vector<int32_t> spec_prompt(uint32_t tokens, uint32_t salt) {
  std::vector<int32_t> prompt;
  for (uint32_t i = 0; i < tokens; ++i) prompt.push_back(static_cast<int32_t>((i * 53 + salt * 29 + 11) % 1024));
  return prompt;
}

void check_decode_shaped_rows(const char* preset) {
  auto backend = layers_test::cpu_backend();
  LayerRequest request;
  request.model = preset;
  OpenedModel opened = open_model(*backend, request);
  DecoderModel& model = *opened.model;
  StatePool pool(*backend, model.cache_shape(512, 4, 6));
  const std::vector<int32_t> prompt = spec_prompt(13, 1), tokens{300, 42, 77, 5, 901};
  // k + 1 successive decode steps of one sequence.
  const uint32_t steps = pool.add_sequence();
  feed_rows(*backend, model, pool, {{steps, 13}}, prompt);
  LogitRows stepped;
  for (int32_t t : tokens) stepped.push_back(feed_rows(*backend, model, pool, {{steps, 1}}, {t}).at(0));

  SUBCASE("alone") {
    const uint32_t seq = pool.add_sequence();
    feed_rows(*backend, model, pool, {{seq, 13}}, prompt);
    CHECK(feed_rows(*backend, model, pool, {{seq, 5, true}}, tokens) == stepped);
  }
  SUBCASE("sharing a batch with a decode-shaped decode row and a prompt chunk") {
    const uint32_t seq = pool.add_sequence(), other = pool.add_sequence(), late = pool.add_sequence();
    feed_rows(*backend, model, pool, {{seq, 13}, {other, 6}}, [&] {
      std::vector<int32_t> ids = prompt;
      const std::vector<int32_t> p = spec_prompt(6, 2);
      ids.insert(ids.end(), p.begin(), p.end());
      return ids;
    }());
    std::vector<int32_t> ids{7};
    ids.insert(ids.end(), tokens.begin(), tokens.end());
    const std::vector<int32_t> p = spec_prompt(9, 3);
    ids.insert(ids.end(), p.begin(), p.end());
    const LogitRows rows = feed_rows(*backend, model, pool, {{other, 1, true}, {seq, 5, true}, {late, 9}}, ids);
    CHECK(LogitRows(rows.begin() + 1, rows.begin() + 6) == stepped);
  }
  SUBCASE("the order is checked: a decode-shaped run after a prompt chunk is refused") {
    const uint32_t seq = pool.add_sequence(), other = pool.add_sequence();
    CHECK_THROWS_AS(feed_rows(*backend, model, pool, {{other, 3}, {seq, 2, true}}, {1, 2, 3, 4, 5}), Error);
  }
}

struct SpecRun {
  std::vector<Completion> completions;
  EngineStats stats;
  uint32_t free_blocks = 0, num_blocks = 0;
};

// Proposes the continuation plain decoding gave (`expected`: prompt and generated ids), every
// third position of it changed: drafts accepted in full, in part or not at all, so every rollback
// (and a DeltaNet's replay) is exercised whatever the model.
class OracleDrafter final : public Drafter {
 public:
  explicit OracleDrafter(std::vector<int32_t> expected) : expected_(std::move(expected)) {}
  std::vector<int32_t> propose(std::span<const int32_t> context, uint32_t max_tokens) override {
    std::vector<int32_t> out;
    for (size_t at = context.size(); at < expected_.size() && out.size() < max_tokens; ++at)
      out.push_back(at % 3 == 0 ? (expected_[at] + 1) % 1024 : expected_[at]);
    return out;
  }

 private:
  std::vector<int32_t> expected_;
};

// Prompts of 11, 3, 20 (a phrase of 5 said four times) and 1 tokens, `new_tokens` each.
std::vector<EngineRequest> spec_requests(bool keep_logits, uint32_t draft_tokens, bool mixed_k, uint32_t new_tokens) {
  std::vector<std::vector<int32_t>> prompts{spec_prompt(11, 4), spec_prompt(3, 5), {}, {17}};
  for (int rep = 0; rep < 4; ++rep) prompts[2].insert(prompts[2].end(), {10, 200, 31, 400, 55});
  std::vector<EngineRequest> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest r;
    r.prompt = prompts[i];
    r.max_new_tokens = new_tokens;
    r.keep_logits = keep_logits;
    r.arrival_step = i == 3 ? 4 : 0;
    if (draft_tokens > 0) {
      r.speculation.method = SpeculationMethod::ngram;
      r.speculation.draft_tokens = mixed_k ? 1 + static_cast<uint32_t>(i) % 4 : draft_tokens;
    }
    out.push_back(std::move(r));
  }
  return out;
}

SpecRun run_spec(Backend& backend, DecoderModel& model, const std::vector<EngineRequest>& requests, const EngineOptions& options) {
  StatePool pool(backend, model.cache_shape(512, 4, static_cast<uint32_t>(requests.size())));
  Engine engine(backend, model, pool, options);
  for (const EngineRequest& r : requests) engine.submit(r);
  engine.run();
  SpecRun out;
  for (uint32_t i = 0; i < engine.requests(); ++i) out.completions.push_back(engine.completion(i));
  out.stats = engine.stats();
  out.free_blocks = pool.free_blocks();
  out.num_blocks = pool.shape().num_blocks;
  return out;
}

void check_same_completions(const SpecRun& spec, const SpecRun& plain) {
  for (size_t i = 0; i < plain.completions.size(); ++i) {
    INFO("request " << i);
    CHECK(spec.completions[i].generated == plain.completions[i].generated);
    CHECK(spec.completions[i].logits == plain.completions[i].logits);  // each the row its id was chosen from
  }
  CHECK(spec.stats.decode_tokens == plain.stats.decode_tokens);
  CHECK(spec.free_blocks == spec.num_blocks);
  size_t drafted = 0, verifications = 0;
  for (const Completion& c : spec.completions) {
    verifications += c.drafts.size();
    for (const auto& d : c.drafts) drafted += d.size();
  }
  CHECK(drafted == spec.stats.drafted_tokens);
  CHECK(verifications == spec.stats.verifications);
}

// n-gram drafts (K = 1..4, and mixed) and the oracle's, against plain decoding. `loops`: the
// model's greedy output repeats itself within `new_tokens`, so n-gram drafts get accepted.
void check_speculation_matches_plain(const char* preset, uint32_t new_tokens, bool loops) {
  auto backend = layers_test::cpu_backend();
  LayerRequest request;
  request.model = preset;
  OpenedModel opened = open_model(*backend, request);
  DecoderModel& model = *opened.model;
  EngineOptions options;
  options.prefill_chunk = 7;  // the long prompts take several steps, beside verifications
  options.token_budget = 16;
  for (const bool keep_logits : {true, false}) {
    const SpecRun plain = run_spec(*backend, model, spec_requests(keep_logits, 0, false, new_tokens), options);
    for (uint32_t k = 0; k <= 4; ++k) {  // k 0: K = 1..4 mixed in one run
      INFO(std::string(preset) << ", K " << k << (k == 0 ? std::string(" (1..4 mixed)") : std::string())
                               << (keep_logits ? std::string(", logits kept") : std::string(", argmax on the backend")));
      const SpecRun spec = run_spec(*backend, model, spec_requests(keep_logits, k, k == 0, new_tokens), options);
      check_same_completions(spec, plain);
      if (loops && k > 0) CHECK(spec.stats.accepted_tokens > 0);
      std::vector<EngineRequest> oracle = spec_requests(keep_logits, k, k == 0, new_tokens);
      for (size_t i = 0; i < oracle.size(); ++i) {
        std::vector<int32_t> expected = oracle[i].prompt;
        expected.insert(expected.end(), plain.completions[i].generated.begin(), plain.completions[i].generated.end());
        oracle[i].speculation.drafter = std::make_shared<OracleDrafter>(expected);
      }
      const SpecRun guided = run_spec(*backend, model, oracle, options);
      check_same_completions(guided, plain);
      CHECK(guided.stats.accepted_tokens > 0);
      CHECK(guided.stats.accepted_tokens < guided.stats.drafted_tokens);  // some rejected: rolled back
      CHECK(guided.stats.steps < plain.stats.steps);
      if (model.cache_shape(64, 4).recurrent.layers > 0) CHECK(guided.stats.replayed_tokens > 0);
    }
  }
}

}  // namespace

TEST_CASE("prompt lookup proposes what followed the latest earlier match of the longest n-gram it finds") {
  const std::vector<int32_t> repeated{1, 2, 3, 4, 1, 2, 3};
  CHECK(ngram_lookup(repeated, 2, 3, 1) == std::vector<int32_t>{4, 1});
  CHECK(ngram_lookup(repeated, 9, 3, 1) == std::vector<int32_t>{4, 1, 2, 3});  // up to the sequence's end
  const std::vector<int32_t> latest{9, 1, 2, 1, 3, 1};
  CHECK(ngram_lookup(latest, 4, 3, 1) == std::vector<int32_t>{3, 1});  // after the later 1, not the earlier
  CHECK(ngram_lookup(latest, 4, 3, 2).empty());                       // no earlier "3 1" or "1 3 1"
  const std::vector<int32_t> longest{5, 7, 8, 6, 7, 9, 5, 7};
  CHECK(ngram_lookup(longest, 1, 3, 1) == std::vector<int32_t>{8});  // "5 7" beats the later "7"
  CHECK(ngram_lookup(longest, 0, 3, 1).empty());
  CHECK(ngram_lookup(std::vector<int32_t>{4}, 3, 3, 1).empty());
  CHECK(make_drafter(SpeculationParams{}) == nullptr);
  SpeculationParams bad;
  bad.ngram_min = 0;
  CHECK_THROWS_AS(bad.validate(), Error);
}

TEST_CASE("the engine refuses speculation with sampling") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, layers_test::tiny_qwen3());
  StatePool pool(*backend, opened.model->cache_shape(64, 4));
  Engine engine(*backend, *opened.model, pool);
  EngineRequest r;
  r.prompt = {1, 2, 3};
  r.speculation.method = SpeculationMethod::ngram;
  r.sampling.temperature = 0.7f;
  CHECK_THROWS_AS(engine.submit(r), Error);
}

TEST_CASE("n-gram speculation, K = 1..4, gives plain greedy decoding's ids and logits: tiny-qwen3") {
  check_speculation_matches_plain("tiny-qwen3", 40, true);
}

TEST_CASE("n-gram speculation, K = 1..4, gives plain greedy decoding's ids and logits: tiny-qwen3.5 (DeltaNet rolled back)") {
  check_speculation_matches_plain("tiny-qwen3.5", 24, false);
}

TEST_CASE("a decode-shaped run computes each row as successive decode steps: tiny-qwen3") {
  check_decode_shaped_rows("tiny-qwen3");
}

TEST_CASE("a decode-shaped run computes each row as successive decode steps: tiny-qwen3.5 (DeltaNet)") {
  check_decode_shaped_rows("tiny-qwen3.5");
}
