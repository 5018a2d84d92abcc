// SPDX-License-Identifier: MIT OR Apache-2.0
#include "decoder/embedding_table.hpp"

#include <metrale/status.hpp>

#include <cstring>

namespace metrale::layers {

EmbeddingTable::EmbeddingTable(std::vector<uint16_t> values, uint32_t vocab, uint32_t hidden)
    : owned_(std::move(values)), vocab_(vocab), hidden_(hidden) {
  if (owned_.size() != uint64_t{vocab} * hidden) {
    throw Error(Status::invalid_argument, "embedding table: " + std::to_string(owned_.size()) + " values for vocab " +
                                              std::to_string(vocab) + " x hidden " + std::to_string(hidden));
  }
  rows_ = owned_.data();
}

EmbeddingTable::EmbeddingTable(std::shared_ptr<const TensorSource> source, const std::string& name, uint32_t vocab,
                               uint32_t hidden)
    : vocab_(vocab), hidden_(hidden) {
  const std::vector<uint64_t> shape{vocab, hidden};
  SafetensorsReader& reader = source->at(name);
  if (reader.info(name).dtype != Dtype::bf16) {
    owned_ = read_bf16_tensor(*source, name, shape);
    rows_ = owned_.data();
    return;
  }
  const std::span<const std::byte> bytes = reader.mapped(name, {Dtype::bf16}, shape);
  // safetensors aligns nothing: a table at an odd offset is copied rather than read unaligned.
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(uint16_t) != 0) {
    owned_.resize(bytes.size() / 2);
    std::memcpy(owned_.data(), bytes.data(), bytes.size());
    reader.release_mapped(name);
    rows_ = owned_.data();
    return;
  }
  rows_ = reinterpret_cast<const uint16_t*>(bytes.data());
  source_ = std::move(source);
}

void EmbeddingTable::gather(std::span<const int32_t> ids, std::span<uint16_t> out) const {
  if (out.size() != ids.size() * size_t{hidden_}) {
    throw Error(Status::invalid_argument, "embedding: " + std::to_string(out.size()) + " values for " +
                                              std::to_string(ids.size()) + " rows of " + std::to_string(hidden_));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || static_cast<uint32_t>(id) >= vocab_) {
      throw Error(Status::invalid_argument, "embedding: row " + std::to_string(i) + ": id " + std::to_string(id) +
                                                " is outside the vocabulary (0.." + std::to_string(vocab_ - 1) + ")");
    }
    std::memcpy(out.data() + i * hidden_, rows_ + size_t(id) * hidden_, size_t{hidden_} * 2);
  }
}

}  // namespace metrale::layers
