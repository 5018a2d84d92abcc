// SPDX-License-Identifier: MIT OR Apache-2.0
// Speculative decoding's pieces on the CPU backend (docs/layers.md, "Speculative decoding"), on
// the tiny-qwen3 and tiny-qwen3.5 (hybrid) presets: a decode-shaped run of k + 1 rows computes
// each row bit for bit as k + 1 successive decode steps (alone or sharing its batch with a decode
// and a prompt chunk).
#include <doctest/doctest.h>

#include "backend_support.hpp"
#include "compose.hpp"
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
}  // namespace

TEST_CASE("a decode-shaped run computes each row as successive decode steps: tiny-qwen3") {
  check_decode_shaped_rows("tiny-qwen3");
}

TEST_CASE("a decode-shaped run computes each row as successive decode steps: tiny-qwen3.5 (DeltaNet)") {
  check_decode_shaped_rows("tiny-qwen3.5");
}
