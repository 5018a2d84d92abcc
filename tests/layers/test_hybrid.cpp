// SPDX-License-Identifier: MIT OR Apache-2.0
// The hybrid decoder (Gated DeltaNet + gated attention, the tiny-qwen3.5 preset on synthetic
// weights) on the CPU backend: a batch of prompts decodes as each prompt alone; a sequence rolled
// back to its checkpoint and fed again decodes bit for bit as one that never took the rolled-back
// tokens (the DeltaNet's state restored, the attention's KV shortened); a fork carries its parent's
// recurrent state. Numerics against transformers are the checkpoints suite's (run_hybrid_tests.py).
#include <doctest/doctest.h>

#include "backend_support.hpp"
#include "model_feed.hpp"
#include "compose.hpp"
#include "embed.hpp"
#include "state/sequence_batch.hpp"

#include <metrale/status.hpp>

using namespace metrale;
using namespace metrale::layers;
using layers_test::feed;
using layers_test::spread_prompt;

namespace {

LayerRequest tiny_hybrid() {
  LayerRequest r;
  r.model = "tiny-qwen3.5";
  return r;
}

}  // namespace

TEST_CASE("hybrid: the preset has DeltaNet and attention layers, and its pool keeps state for each kind") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, tiny_hybrid());
  DecoderModel& model = *opened.model;
  REQUIRE(model.layers().size() == 4);
  CHECK(model.layers()[0]->deltanet() != nullptr);
  CHECK(model.layers()[1]->attention() != nullptr);
  const StatePoolShape shape = model.cache_shape(64, 8, 3);
  CHECK(shape.layers == 2);  // KV pools for the two attention layers only
  CHECK(shape.head_dim == 256);
  CHECK(shape.recurrent.layers == 2);
  CHECK(shape.recurrent.max_sequences == 3);
  CHECK(shape.recurrent.bytes == 4 * (3 * (2 * 2 * 64 + 4 * 64) + 4 * 64 * 64));  // window, then S
  bool audited = false;
  for (const auto& row : opened.audit) audited |= row.module == "deltanet" && row.kernel == "delta_rule_chunked";
  CHECK(audited);
}

TEST_CASE("hybrid: a batch of prompts, chunked, decodes as each prompt alone") {
  EmbeddedModel model(layers_test::cpu_backend(), tiny_hybrid());
  const std::vector<int32_t> a = spread_prompt(70), b{900, 17}, c = spread_prompt(5);
  const Generation together = model.generate({a, b, c}, 5);
  const std::vector<std::vector<int32_t>> prompts{a, b, c};
  for (size_t p = 0; p < 3; ++p) {
    const Generation alone = model.generate({prompts[p]}, 5);
    CHECK(alone.ids[0] == together.ids[p]);
    CHECK(alone.logits[0] == together.logits[p]);
  }
}

TEST_CASE("hybrid: rolled back to its checkpoint and fed again, a sequence decodes as one that never took the tokens") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, tiny_hybrid());
  DecoderModel& model = *opened.model;
  StatePool pool(*backend, model.cache_shape(256, 4, 4));
  const std::vector<int32_t> prompt = spread_prompt(10);

  const uint32_t never = pool.add_sequence();
  feed(*backend, model, pool, never, prompt);
  feed(*backend, model, pool, never, {300});
  const std::vector<uint16_t> after_d = feed(*backend, model, pool, never, {42});
  const std::vector<uint16_t> after_e = feed(*backend, model, pool, never, {77});

  SUBCASE("the checkpoint where the rollback lands: nothing to feed again") {
    const uint32_t seq = pool.add_sequence();
    feed(*backend, model, pool, seq, prompt);
    feed(*backend, model, pool, seq, {300});
    pool.checkpoint(seq);
    feed(*backend, model, pool, seq, {5, 6, 7});  // three tokens to forget, one batch
    feed(*backend, model, pool, seq, {8});
    CHECK(pool.rollback(seq, 4) == 0);
    CHECK(pool.length(seq) == 11);
    CHECK(feed(*backend, model, pool, seq, {42}) == after_d);
    CHECK(feed(*backend, model, pool, seq, {77}) == after_e);
  }
  SUBCASE("an earlier checkpoint: the tokens after it are fed again") {
    const uint32_t seq = pool.add_sequence();
    feed(*backend, model, pool, seq, prompt);
    pool.checkpoint(seq);
    feed(*backend, model, pool, seq, {300});
    feed(*backend, model, pool, seq, {5, 6, 7, 8});
    CHECK(pool.rollback(seq, 4) == 1);  // back to the checkpoint: token 300 again
    CHECK(pool.length(seq) == 10);
    feed(*backend, model, pool, seq, {300});
    CHECK(feed(*backend, model, pool, seq, {42}) == after_d);
    CHECK(feed(*backend, model, pool, seq, {77}) == after_e);
  }
}

TEST_CASE("hybrid: a fork carries its parent's recurrent state; each then decodes as if alone") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, tiny_hybrid());
  DecoderModel& model = *opened.model;
  StatePool pool(*backend, model.cache_shape(256, 4, 4));
  layers_test::check_fork_decodes_as_alone(*backend, model, pool);
}

TEST_CASE("hybrid: a batch giving one sequence two runs is refused before anything is appended") {
  auto backend = layers_test::cpu_backend();
  OpenedModel opened = open_model(*backend, tiny_hybrid());
  StatePool pool(*backend, opened.model->cache_shape(64, 4, 2));
  const uint32_t seq = pool.add_sequence();
  const std::vector<SequenceRows> runs{{seq, 2}, {seq, 1}};
  const std::vector<int32_t> positions{0, 1, 2};
  CHECK_THROWS_WITH_AS(SequenceBatch(*backend, pool, runs, positions), doctest::Contains("has two runs in one batch"), Error);
  CHECK(pool.length(seq) == 0);
}
