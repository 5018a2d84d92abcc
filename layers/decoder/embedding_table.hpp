// SPDX-License-Identifier: MIT OR Apache-2.0
// The token embedding table, kept on the host and read in place (as llama.cpp keeps token_embd on
// the CPU): a batch's rows are gathered here and uploaded as its first hidden states, so the
// device holds no copy of the table, and a checkpoint's bf16 table is used in the file's
// read-only mapping, where only the rows gathered are ever read from disk. A tied logits
// projection is the device's only copy of those weights (in its kernels' layout).
// Read-only after construction: gather() may run on several threads.
#pragma once

#include "io/tensor_source.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace metrale::layers {

class EmbeddingTable {
 public:
  EmbeddingTable() = default;
  // A table in memory: bf16 [vocab, hidden].
  EmbeddingTable(std::vector<uint16_t> values, uint32_t vocab, uint32_t hidden);
  // The checkpoint's tensor `name` [vocab, hidden]: BF16 mapped in place, F16 / F32 rounded to
  // bf16 once into memory. Throws Error naming the tensor for another dtype or shape.
  EmbeddingTable(std::shared_ptr<const TensorSource> source, const std::string& name, uint32_t vocab, uint32_t hidden);

  // Rows `ids` into `out` (bf16 [ids.size(), hidden]). Error(invalid_argument) naming the id and
  // its place for one outside the vocabulary.
  void gather(std::span<const int32_t> ids, std::span<uint16_t> out) const;

  uint32_t vocab() const noexcept { return vocab_; }
  uint32_t hidden() const noexcept { return hidden_; }
  // Used in place from the checkpoint's mapping (else held in memory).
  bool mapped() const noexcept { return source_ != nullptr; }
  // The table's bytes (mapped or held).
  uint64_t bytes() const noexcept { return uint64_t{vocab_} * hidden_ * 2; }

 private:
  std::shared_ptr<const TensorSource> source_;  // keeps the mapping alive
  std::vector<uint16_t> owned_;
  const uint16_t* rows_ = nullptr;
  uint32_t vocab_ = 0, hidden_ = 0;
};

}  // namespace metrale::layers
