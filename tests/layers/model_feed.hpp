// SPDX-License-Identifier: MIT OR Apache-2.0
// Feeding a model by hand, for the whole-model tests (test_decoder.cpp, test_hybrid.cpp): one
// sequence's tokens as one batch over a state pool the test owns, and the logits of the last.
#pragma once

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

}  // namespace layers_test
