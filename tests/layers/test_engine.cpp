// SPDX-License-Identifier: MIT OR Apache-2.0
// The engine loop (layers/engine/engine.hpp) on the CPU backend with tiny-qwen3's synthetic
// weights: requests admitted at different steps, with prompts of different lengths, prefilled in
// chunks under a token budget beside the running decodes, give each the ids it gets running alone;
// a pool too small for all of them admits each when an earlier one has retired; a request the pool
// could never hold is refused naming the sizes; seeded sampling is reproducible; greedy ids chosen
// by sample/argmax on the backend equal those chosen on the host.
#include <doctest/doctest.h>

#include "backend_support.hpp"
#include "compose.hpp"
#include "engine/engine.hpp"

#include <metrale/audit.hpp>
#include <metrale/status.hpp>

#include <cmath>

using namespace metrale;
using namespace metrale::layers;

namespace {

std::vector<int32_t> prompt_of(uint32_t tokens, uint32_t salt) {
  std::vector<int32_t> prompt;
  for (uint32_t i = 0; i < tokens; ++i) prompt.push_back(static_cast<int32_t>((i * 97 + salt * 31 + 3) % 1024));
  return prompt;
}

EngineRequest request(uint32_t prompt_tokens, uint32_t salt, uint32_t new_tokens, uint64_t arrival) {
  EngineRequest r;
  r.prompt = prompt_of(prompt_tokens, salt);
  r.max_new_tokens = new_tokens;
  r.arrival_step = arrival;
  r.keep_logits = true;
  return r;
}

struct Ran {
  std::vector<Completion> completions;
  EngineStats stats;
  uint32_t free_blocks = 0, num_blocks = 0;
  bool argmax_on_backend = false;
};

Ran run(Backend& backend, DecoderModel& model, const std::vector<EngineRequest>& requests, const EngineOptions& options,
        uint64_t kv_tokens) {
  StatePool pool(backend, model.cache_shape(kv_tokens, 4));
  Engine engine(backend, model, pool, options);
  for (const EngineRequest& r : requests) engine.submit(r);
  engine.run();
  Ran out;
  for (uint32_t i = 0; i < engine.requests(); ++i) out.completions.push_back(engine.completion(i));
  out.stats = engine.stats();
  out.argmax_on_backend = engine.argmax_on_backend();
  out.free_blocks = pool.free_blocks();
  out.num_blocks = pool.shape().num_blocks;
  return out;
}

// Each request alone, under the same options, in a pool of its own.
std::vector<Completion> alone(Backend& backend, DecoderModel& model, std::vector<EngineRequest> requests,
                              const EngineOptions& options) {
  std::vector<Completion> out;
  for (EngineRequest r : requests) {
    r.arrival_step = 0;
    out.push_back(run(backend, model, {r}, options, 256).completions.at(0));
  }
  return out;
}

double worst_logit_difference(const Completion& a, const Completion& b) {
  double worst = 0;
  for (size_t i = 0; i < std::min(a.logits.size(), b.logits.size()); ++i) worst = std::max(worst, std::abs(double(a.logits[i]) - b.logits[i]));
  return worst;
}

}  // namespace

TEST_CASE("requests admitted at different steps, prefilled in chunks beside running decodes, give the ids of each alone") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, layers_test::tiny_qwen3());
  DecoderModel& model = *opened.model;
  const std::vector<EngineRequest> requests{request(23, 1, 8, 0), request(5, 2, 6, 2), request(17, 3, 5, 3),
                                            request(1, 4, 4, 9)};
  EngineOptions options;
  options.prefill_chunk = 6;
  options.token_budget = 9;
  const Ran together = run(*backend, model, requests, options, 512);
  const std::vector<Completion> each = alone(*backend, model, requests, options);
  for (size_t i = 0; i < requests.size(); ++i) {
    const Completion& c = together.completions[i];
    INFO("request " << i << ": admitted at step " << c.admitted_step << ", finished at " << c.finished_step
                    << ", logits at most " << worst_logit_difference(c, each[i]) << " from alone");
    CHECK(c.finished);
    CHECK(c.generated.size() == requests[i].max_new_tokens);
    CHECK(c.generated == each[i].generated);
    CHECK(c.admitted_step >= requests[i].arrival_step);
  }
  // Continuous: request 1 joined while request 0 was still prefilling (23 tokens take 3+ steps),
  // and request 3 arrived after the first ones had been decoding.
  CHECK(together.completions[1].admitted_step == 2);
  CHECK(together.completions[0].finished_step > 2);
  CHECK(together.completions[3].admitted_step == 9);
  CHECK(together.stats.prefill_tokens == 23 + 5 + 17 + 1);
  CHECK(together.stats.decode_tokens == 7 + 5 + 4 + 3);
  CHECK(together.stats.logit_rows_copied == 8 + 6 + 5 + 4);  // only the rows that chose a token
  CHECK(together.free_blocks == together.num_blocks);         // every retired sequence's state freed
}

TEST_CASE("a pool too small for every request admits each when an earlier one has retired") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, layers_test::tiny_qwen3());
  DecoderModel& model = *opened.model;
  // 12 + 6 - 1 = 17 tokens: 5 blocks of 4 each; the pool has 12 blocks, room for two at a time.
  const std::vector<EngineRequest> requests{request(12, 5, 6, 0), request(12, 6, 6, 0), request(12, 7, 6, 0),
                                            request(12, 8, 6, 1)};
  EngineOptions options;
  options.prefill_chunk = 8;
  options.token_budget = 16;
  const Ran together = run(*backend, model, requests, options, 48);
  const std::vector<Completion> each = alone(*backend, model, requests, options);
  for (size_t i = 0; i < requests.size(); ++i) CHECK(together.completions[i].generated == each[i].generated);
  CHECK(together.completions[0].admitted_step == 0);
  CHECK(together.completions[1].admitted_step == 0);
  CHECK(together.completions[2].admitted_step == together.completions[0].finished_step + 1);
  CHECK(together.completions[3].admitted_step == together.completions[1].finished_step + 1);
  CHECK(together.free_blocks == together.num_blocks);

  // One that could never fit is refused when submitted, naming the sizes.
  StatePool pool(*backend, model.cache_shape(48, 4));
  Engine engine(*backend, model, pool, options);
  try {
    engine.submit(request(45, 9, 8, 0));
    FAIL("a request of 52 tokens was accepted into a 48-token pool");
  } catch (const Error& e) {
    CHECK(e.status() == Status::out_of_memory);
    CHECK(std::string(e.what()).find("a prompt of 45 tokens and 8 new tokens need 52 tokens in 13 blocks of 4, but the KV "
                                     "cache holds 48 tokens (12 blocks)") != std::string::npos);
  }
  EngineRequest empty;
  CHECK_THROWS_AS(engine.submit(empty), Error);
  CHECK_THROWS_AS(engine.submit(request(3, 1, 0, 0)), Error);
  CHECK_FALSE(engine.step());  // nothing was queued
}

TEST_CASE("seeded sampling in the engine is reproducible and independent of what a request is batched with") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, layers_test::tiny_qwen3());
  DecoderModel& model = *opened.model;
  std::vector<EngineRequest> requests{request(9, 1, 12, 0), request(4, 2, 12, 1)};
  for (EngineRequest& r : requests) {
    r.sampling.temperature = 1.0f;
    r.sampling.top_k = 50;
    r.sampling.seed = 1234;
  }
  requests[1].sampling.seed = 99;
  EngineOptions options;
  options.prefill_chunk = 4;
  options.token_budget = 6;
  const Ran first = run(*backend, model, requests, options, 256);
  const Ran second = run(*backend, model, requests, options, 256);
  const std::vector<Completion> each = alone(*backend, model, requests, options);
  for (size_t i = 0; i < requests.size(); ++i) {
    CHECK(first.completions[i].generated == second.completions[i].generated);
    CHECK(first.completions[i].generated == each[i].generated);
  }
  // Sampled, not greedy: some token differs from the argmax of its logits.
  const Completion& c = first.completions[0];
  size_t not_argmax = 0;
  for (size_t t = 0; t < c.generated.size(); ++t) {
    const std::span<const float> row(c.logits.data() + t * 1024, 1024);
    not_argmax += argmax(row) != c.generated[t];
  }
  CHECK(not_argmax > 0);
}

TEST_CASE("greedy ids chosen by sample/argmax on the backend equal the host's argmax; the stats say which path ran") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, layers_test::tiny_qwen3());
  DecoderModel& model = *opened.model;
  std::vector<EngineRequest> kept{request(23, 1, 8, 0), request(5, 2, 6, 2), request(17, 3, 5, 3), request(1, 4, 4, 9)};
  std::vector<EngineRequest> ids_only = kept;
  for (EngineRequest& r : ids_only) r.keep_logits = false;
  EngineOptions options;
  options.prefill_chunk = 6;
  options.token_budget = 9;
  backend->audit().clear();
  const Ran on_backend = run(*backend, model, ids_only, options, 512);
  const Ran on_host = run(*backend, model, kept, options, 512);
  constexpr uint64_t kTokens = 8 + 6 + 5 + 4;
  CHECK(on_backend.argmax_on_backend);
  CHECK(on_backend.stats.ids_chosen_on_backend == kTokens);
  CHECK(on_backend.stats.logit_rows_copied == 0);
  CHECK(on_host.stats.ids_chosen_on_backend == 0);
  CHECK(on_host.stats.logit_rows_copied == kTokens);
  for (size_t i = 0; i < kept.size(); ++i) {
    CAPTURE(i);
    const Completion& b = on_backend.completions[i];
    const Completion& h = on_host.completions[i];
    CHECK(b.generated == h.generated);
    CHECK(b.logits.empty());
    // The host's ids are the argmax of the logits it kept: both paths chose the same way.
    REQUIRE(h.logits.size() == h.generated.size() * 1024);
    for (size_t t = 0; t < h.generated.size(); ++t)
      CHECK(argmax(std::span<const float>(h.logits.data() + t * 1024, 1024)) == h.generated[t]);
  }
  // Each engine's try lookup is one audit row: resolved, a try, from the engine.
  size_t rows = 0;
  for (const AuditRow& row : backend->audit().snapshot()) {
    if (row.module != "sample" || row.kernel != "argmax") continue;
    ++rows;
    CHECK(row.kind == LookupKind::try_lookup);
    CHECK(row.outcome == LookupOutcome::resolved);
    CHECK(row.site.file.find("engine.cpp") != std::string::npos);
  }
  CHECK(rows == 2);
}

TEST_CASE("a step with a row that keeps its logits or samples chooses every token of it on the host") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, layers_test::tiny_qwen3());
  DecoderModel& model = *opened.model;
  EngineRequest greedy = request(7, 5, 6, 0);
  greedy.keep_logits = false;
  EngineRequest keeps = request(7, 6, 6, 0);  // keep_logits
  EngineRequest sampled = request(7, 7, 6, 0);
  sampled.keep_logits = false;
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 3;
  EngineRequest prompt_logits = request(7, 8, 6, 0);
  prompt_logits.keep_logits = false;
  prompt_logits.keep_prompt_logits = true;
  EngineOptions options;
  options.token_budget = 16;
  const Completion alone_on_backend = run(*backend, model, {greedy}, options, 256).completions.at(0);
  for (const EngineRequest& other : {keeps, sampled, prompt_logits}) {
    // Same prompt length and new tokens: every step has a row of each, so every step is on the host.
    const Ran mixed = run(*backend, model, {greedy, other}, options, 256);
    CHECK(mixed.stats.ids_chosen_on_backend == 0);
    CHECK(mixed.stats.logit_rows_copied >= 12);
    CHECK(mixed.completions[0].generated == alone_on_backend.generated);
  }
  CHECK(run(*backend, model, {greedy}, options, 256).stats.ids_chosen_on_backend == 6);
}
