// SPDX-License-Identifier: MIT OR Apache-2.0
#include "state/state_pool.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <functional>
#include <string>

namespace metrale::layers {

namespace {

size_t pool_bytes(const StatePoolShape& s) {
  if (s.head_dim != 64 && s.head_dim != 128)
    throw Error(Status::invalid_argument, "StatePool: head_dim must be 64 or 128 (got " + std::to_string(s.head_dim) + ")");
  if (s.block_size == 0 || s.block_size > 256 || (s.block_size & (s.block_size - 1)) != 0)
    throw Error(Status::invalid_argument,
                "StatePool: block_size must be a power of two from 1 to 256 (got " + std::to_string(s.block_size) + ")");
  if (s.kv_heads == 0 || s.num_blocks == 0 || s.layers == 0)
    throw Error(Status::invalid_argument, "StatePool: kv_heads, num_blocks and layers must be at least 1 (got " +
                                              std::to_string(s.kv_heads) + ", " + std::to_string(s.num_blocks) + ", " +
                                              std::to_string(s.layers) + ")");
  return size_t{s.num_blocks} * s.kv_heads * s.block_size * s.head_dim * 2;
}

}  // namespace

StatePool::StatePool(Backend& backend, const StatePoolShape& shape) : shape_(shape) {
  const size_t bytes = pool_bytes(shape);
  for (uint32_t l = 0; l < shape.layers; ++l) {
    k_.emplace_back(backend, bytes);
    v_.emplace_back(backend, bytes);
  }
  free_.resize(shape.num_blocks);
  for (uint32_t i = 0; i < shape.num_blocks; ++i) free_[i] = static_cast<int32_t>(shape.num_blocks - 1 - i);
}

uint32_t StatePool::add_sequence() {
  sequences_.emplace_back();
  return static_cast<uint32_t>(sequences_.size() - 1);
}

const StatePool::Sequence& StatePool::sequence(uint32_t seq) const {
  if (seq >= sequences_.size() || !sequences_[seq].live)
    throw Error(Status::invalid_argument, "StatePool: sequence " + std::to_string(seq) + " is not live");
  return sequences_[seq];
}

std::vector<int32_t> StatePool::append(uint32_t seq, uint32_t tokens) {
  sequence(seq);
  Sequence& s = sequences_[seq];
  const uint64_t bs = shape_.block_size;
  const uint64_t needed_blocks = (uint64_t{s.length} + tokens + bs - 1) / bs - s.blocks.size();
  if (needed_blocks > free_.size())
    throw Error(Status::out_of_memory, "StatePool: sequence " + std::to_string(seq) + " (length " + std::to_string(s.length) +
                                           ") asks for " + std::to_string(tokens) + " tokens, which need " +
                                           std::to_string(needed_blocks) + " new blocks of block_size " +
                                           std::to_string(bs) + "; " + std::to_string(free_.size()) + " of " +
                                           std::to_string(shape_.num_blocks) + " blocks are free");
  for (uint64_t i = 0; i < needed_blocks; ++i) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  std::vector<int32_t> slots(tokens);
  for (uint32_t t = 0; t < tokens; ++t) {
    const uint32_t pos = s.length + t;
    slots[t] = s.blocks[pos / bs] * static_cast<int32_t>(bs) + static_cast<int32_t>(pos % bs);
  }
  s.length += tokens;
  return slots;
}

void StatePool::release(uint32_t seq) {
  sequence(seq);
  Sequence& s = sequences_[seq];
  // Pushed back so that the lowest block comes out first again.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) free_.push_back(*it);
  std::sort(free_.begin(), free_.end(), std::greater<>());
  s = Sequence{};
  s.live = false;
}

uint32_t StatePool::length(uint32_t seq) const { return sequence(seq).length; }

std::span<const int32_t> StatePool::block_table(uint32_t seq) const { return sequence(seq).blocks; }

StatePool::DecodeTables StatePool::decode_tables(std::span<const uint32_t> seqs) const {
  DecodeTables out;
  for (uint32_t seq : seqs) out.max_blocks = std::max(out.max_blocks, static_cast<uint32_t>(sequence(seq).blocks.size()));
  out.block_tables.assign(seqs.size() * size_t{out.max_blocks}, 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = sequence(seqs[i]);
    std::copy(s.blocks.begin(), s.blocks.end(), out.block_tables.begin() + static_cast<std::ptrdiff_t>(i * out.max_blocks));
    out.context_lens.push_back(static_cast<int32_t>(s.length));
  }
  return out;
}

}  // namespace metrale::layers
