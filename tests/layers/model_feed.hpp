// SPDX-License-Identifier: MIT OR Apache-2.0
// Feeding a model by hand, for the whole-model tests (test_decoder.cpp, test_hybrid.cpp): one
// sequence's tokens as one batch over a state pool the test owns, and the logits of the last.
#pragma once

#include <doctest/doctest.h>

#include "decoder/model.hpp"
#include "state/sequence_batch.hpp"

#include <metrale/backend.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace layers_test {

// Feeds `ids` to sequence `seq` of `pool` in one batch; the logits of the last, as bf16 bits.
inline std::vector<uint16_t> feed(metrale::Backend& backend, metrale::layers::DecoderModel& model,
                                  metrale::layers::StatePool& pool, uint32_t seq, const std::vector<int32_t>& ids) {
  using namespace metrale::layers;
  const auto rows = static_cast<uint32_t>(ids.size());
  std::vector<int32_t> positions(rows);
  for (uint32_t i = 0; i < rows; ++i) positions[i] = static_cast<int32_t>(pool.length(seq) + i);
  const SequenceRows run{seq, rows};
  const SequenceBatch batch(backend, pool, std::span(&run, 1), positions);
  const metrale::DevicePtr hidden = model.forward(batch, ids);
  const uint32_t last = rows - 1;
  std::vector<uint16_t> logits(model.config().vocab_size);
  backend.copy_to_host(logits.data(), model.logits(hidden, rows, std::span(&last, 1)), logits.size() * 2);
  backend.synchronize();
  return logits;
}

// A prompt of `tokens` ids spread over a vocabulary of 1024.
inline std::vector<int32_t> spread_prompt(uint32_t tokens) {
  std::vector<int32_t> prompt;
  for (uint32_t i = 0; i < tokens; ++i) prompt.push_back(static_cast<int32_t>((i * 131 + 7) % 1024));
  return prompt;
}

// A prompt of 10 tokens decoded alone twice (then 42, 43 / 99, 100), then once and forked: the
// parent then takes 42, 43 and the child 99, 100, interleaved; each gets the logits its run alone
// got. The fork copies no block (the half-full last one is copied when first written) and the
// full blocks stay shared. Whatever state the model keeps (KV, recurrent) must be carried.
inline void check_fork_decodes_as_alone(metrale::Backend& backend, metrale::layers::DecoderModel& model,
                                        metrale::layers::StatePool& pool) {
  const std::vector<int32_t> prompt = spread_prompt(10);  // with blocks of 4, the last half full
  std::vector<std::vector<uint16_t>> alone;
  for (const int32_t first : {42, 99}) {
    const uint32_t seq = pool.add_sequence();
    feed(backend, model, pool, seq, prompt);
    alone.push_back(feed(backend, model, pool, seq, {first}));
    alone.push_back(feed(backend, model, pool, seq, {first + 1}));
    pool.release(seq);
  }
  const uint32_t parent = pool.add_sequence();
  feed(backend, model, pool, parent, prompt);
  const uint32_t free_before = pool.free_blocks();
  const uint32_t child = pool.fork(parent);
  CHECK(pool.free_blocks() == free_before);
  CHECK(feed(backend, model, pool, child, {99}) == alone[2]);
  CHECK(feed(backend, model, pool, parent, {42}) == alone[0]);
  CHECK(feed(backend, model, pool, child, {100}) == alone[3]);
  CHECK(feed(backend, model, pool, parent, {43}) == alone[1]);
  CHECK(pool.block_table(child)[0] == pool.block_table(parent)[0]);  // the full blocks stay shared
}

}  // namespace layers_test
