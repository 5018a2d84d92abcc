// SPDX-License-Identifier: MIT OR Apache-2.0
// The decoder on the CPU backend, on a preset's synthetic weights: greedy generation through the
// public EmbeddedModel; a batch of prompts decoded together gives each prompt exactly the ids and
// logits it gets alone (sequences do not see each other's cache; batched decode is per sequence),
// and chunked prefill gives the ids of a whole-prompt prefill. Numerics against transformers' math
// are the checkpoints suite's (tests/checkpoints/run_decoder_tests.py).
#include <doctest/doctest.h>

#include "backend_support.hpp"
#include "model_feed.hpp"
#include "compose.hpp"
#include "engine/generate.hpp"
#include "embed.hpp"
#include "state/sequence_batch.hpp"

#include <metrale/status.hpp>

using namespace metrale;
using namespace metrale::layers;
using layers_test::feed;
using layers_test::spread_prompt;

TEST_CASE("a batch of prompts decodes as each prompt alone") {
  EmbeddedModel model(layers_test::cpu_backend(), layers_test::tiny_qwen3());
  REQUIRE(model.vocab_size() == 1024);
  const std::vector<int32_t> a{1, 2, 3, 4, 5, 6, 7}, b{900, 17}, c{5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 40};
  const Generation together = model.generate({a, b, c}, 6);
  REQUIRE(together.ids.size() == 3);
  CHECK(together.prefill_tokens == a.size() + b.size() + c.size());
  CHECK(together.decode_tokens == 3 * 5);
  const std::vector<std::vector<int32_t>> prompts{a, b, c};
  for (size_t p = 0; p < 3; ++p) {
    const Generation alone = model.generate({prompts[p]}, 6);
    CHECK(alone.ids[0] == together.ids[p]);
    CHECK(alone.logits[0] == together.logits[p]);
  }
  bool audited_decode = false;
  for (const auto& row : model.build_audit()) audited_decode |= row.module == "attn" && row.kernel == "attn_decode";
  CHECK(audited_decode);
}

TEST_CASE("chunked prefill gives the ids of one whole-prompt prefill") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, layers_test::tiny_qwen3());
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 1024);
  GenerateOptions whole;
  whole.max_new_tokens = 4;
  GenerateOptions chunked = whole;
  chunked.prefill_chunk = 7;  // 6 chunks, the last of 5 rows, each after the earlier ones
  chunked.block_size = 4;
  const GenerateResult w = generate_tokens(*backend, *opened.model, {prompt}, whole);
  const GenerateResult c = generate_tokens(*backend, *opened.model, {prompt}, chunked);
  CHECK(w.generated == c.generated);
  REQUIRE(w.logits[0].size() == c.logits[0].size());
  // Other chunk boundaries sum the attention in another order: the same ids, logits within bf16 noise.
  double worst = 0;
  for (size_t i = 0; i < w.logits[0].size(); ++i) worst = std::max(worst, std::abs(double(w.logits[0][i]) - c.logits[0][i]));
  CHECK(worst < 0.25);
}

TEST_CASE("generation refuses what it cannot hold, naming the sizes, before running") {
  EmbeddedModel model(layers_test::cpu_backend(), layers_test::tiny_qwen3());
  try {
    model.generate({std::vector<int32_t>(40, 1)}, 4, 32);
    FAIL("a 40-token prompt in a 32-token cache was accepted");
  } catch (const Error& e) {
    CHECK(e.status() == Status::out_of_memory);
    CHECK(std::string(e.what()).find("40 tokens") != std::string::npos);
    CHECK(std::string(e.what()).find("32 tokens") != std::string::npos);
  }
  CHECK_THROWS_AS(model.generate({{1, 2, 1024}}, 2), Error);
  CHECK_THROWS_AS(model.generate({{}}, 2), Error);
  CHECK_THROWS_AS(model.generate({{1}}, 0), Error);
}

TEST_CASE("rolling a sequence back by k tokens, then decoding, gives the logits of never having decoded them") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, layers_test::tiny_qwen3());
  DecoderModel& model = *opened.model;
  StatePool pool(*backend, model.cache_shape(128, 4));  // blocks of 4: the rollback ends inside a block
  const std::vector<int32_t> prompt = spread_prompt(10);

  const uint32_t never = pool.add_sequence();
  feed(*backend, model, pool, never, prompt);
  feed(*backend, model, pool, never, {300});
  const std::vector<uint16_t> after_d = feed(*backend, model, pool, never, {42});
  const std::vector<uint16_t> after_e = feed(*backend, model, pool, never, {77});

  const uint32_t seq = pool.add_sequence();
  feed(*backend, model, pool, seq, prompt);
  feed(*backend, model, pool, seq, {300});
  feed(*backend, model, pool, seq, {5, 6, 7});  // three tokens to forget, one batch
  feed(*backend, model, pool, seq, {8});
  CHECK(pool.rollback(seq, 4) == 0);
  CHECK(pool.length(seq) == 11);
  CHECK(feed(*backend, model, pool, seq, {42}) == after_d);
  CHECK(feed(*backend, model, pool, seq, {77}) == after_e);
}

TEST_CASE("a forked sequence shares its parent's prompt and each then decodes as if alone") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, layers_test::tiny_qwen3());
  DecoderModel& model = *opened.model;
  StatePool pool(*backend, model.cache_shape(128, 4));
  layers_test::check_fork_decodes_as_alone(*backend, model, pool);
}
