// SPDX-License-Identifier: MIT OR Apache-2.0
#include "state/state_pool.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <functional>
#include <string>

namespace metrale::layers {

namespace {

void check_shape(const StatePoolShape& s) {
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256)
    throw Error(Status::invalid_argument, "StatePool: head_dim must be 64, 128 or 256 (got " + std::to_string(s.head_dim) + ")");
  if (s.block_size == 0 || s.block_size > 256 || (s.block_size & (s.block_size - 1)) != 0)
    throw Error(Status::invalid_argument,
                "StatePool: block_size must be a power of two from 1 to 256 (got " + std::to_string(s.block_size) + ")");
  if (s.kv_heads == 0 || s.num_blocks == 0 || s.layers == 0)
    throw Error(Status::invalid_argument, "StatePool: kv_heads, num_blocks and layers must be at least 1 (got " +
                                              std::to_string(s.kv_heads) + ", " + std::to_string(s.num_blocks) + ", " +
                                              std::to_string(s.layers) + ")");
  const RecurrentStateShape& r = s.recurrent;
  if (r.layers > 0 && (r.bytes == 0 || r.max_sequences == 0))
    throw Error(Status::invalid_argument, "StatePool: " + std::to_string(r.layers) + " recurrent layers need bytes and max_sequences " +
                                              "of at least 1 (got " + std::to_string(r.bytes) + ", " +
                                              std::to_string(r.max_sequences) + ")");
}

uint64_t blocks_for(uint64_t tokens, uint64_t block_size) { return (tokens + block_size - 1) / block_size; }

// A stack handing out its lowest entry first.
void push_sorted(std::vector<int32_t>& stack, int32_t value) {
  stack.push_back(value);
  std::sort(stack.begin(), stack.end(), std::greater<>());
}

}  // namespace

uint64_t StatePoolShape::bytes() const noexcept {
  return 2 * uint64_t{layers} * num_blocks * block_bytes() + 2 * uint64_t{recurrent.layers} * recurrent.max_sequences * recurrent.bytes;
}

StatePool::StatePool(Backend& backend, const StatePoolShape& shape) : backend_(&backend), shape_(shape) {
  check_shape(shape);
  const size_t bytes = shape.num_blocks * shape.block_bytes();
  for (uint32_t l = 0; l < shape.layers; ++l) {
    k_.emplace_back(backend, bytes);
    v_.emplace_back(backend, bytes);
  }
  const RecurrentStateShape& r = shape.recurrent;
  for (uint32_t l = 0; l < r.layers; ++l) {
    recurrent_.emplace_back(backend, r.max_sequences * r.bytes);
    saved_.emplace_back(backend, r.max_sequences * r.bytes);
  }
  refs_.assign(shape.num_blocks, 0);
  free_.resize(shape.num_blocks);
  for (uint32_t i = 0; i < shape.num_blocks; ++i) free_[i] = static_cast<int32_t>(shape.num_blocks - 1 - i);
  free_slots_.resize(r.layers > 0 ? r.max_sequences : 0);
  for (size_t i = 0; i < free_slots_.size(); ++i) free_slots_[i] = static_cast<int32_t>(free_slots_.size() - 1 - i);
}

const StatePool::Sequence& StatePool::sequence(uint32_t seq) const {
  if (!live(seq)) throw Error(Status::invalid_argument, "StatePool: sequence " + std::to_string(seq) + " is not live");
  return sequences_[seq];
}

StatePool::Sequence& StatePool::sequence(uint32_t seq) {
  return const_cast<Sequence&>(static_cast<const StatePool&>(*this).sequence(seq));
}

int32_t StatePool::take_block() {
  const int32_t block = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(block)] = 1;
  return block;
}

void StatePool::drop_block(int32_t block) {
  if (--refs_[static_cast<size_t>(block)] == 0) push_sorted(free_, block);
}

int32_t StatePool::take_slot(const char* what) {
  if (shape_.recurrent.layers == 0) return -1;
  if (free_slots_.empty()) {
    throw Error(Status::out_of_memory, std::string("StatePool: ") + what + " needs a recurrent state slot (" +
                                           std::to_string(shape_.recurrent.bytes) + " bytes in each of " +
                                           std::to_string(shape_.recurrent.layers) + " layers); all " +
                                           std::to_string(shape_.recurrent.max_sequences) + " slots are held");
  }
  const int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

void StatePool::copy_states(std::vector<DeviceBuffer>& to, int32_t to_slot, const std::vector<DeviceBuffer>& from,
                            int32_t from_slot) {
  const uint64_t n = shape_.recurrent.bytes;
  for (uint32_t l = 0; l < shape_.recurrent.layers; ++l) {
    backend_->copy_device(to[l].at(static_cast<size_t>(to_slot) * n), from[l].at(static_cast<size_t>(from_slot) * n), n);
  }
}

uint32_t StatePool::add_sequence(uint32_t reserve_tokens) {
  const uint64_t blocks = blocks_for(reserve_tokens, shape_.block_size);
  if (blocks > free_.size()) {
    throw Error(Status::out_of_memory, "StatePool: a new sequence of " + std::to_string(reserve_tokens) + " tokens needs " +
                                           std::to_string(blocks) + " blocks of block_size " + std::to_string(shape_.block_size) +
                                           "; " + std::to_string(free_.size()) + " of " + std::to_string(shape_.num_blocks) +
                                           " blocks are free");
  }
  Sequence s;
  s.slot = take_slot("a new sequence");
  for (uint64_t i = 0; i < blocks; ++i) s.blocks.push_back(take_block());
  const uint64_t n = shape_.recurrent.bytes;
  for (uint32_t l = 0; l < shape_.recurrent.layers; ++l) {  // a recurrent state starts at zero
    backend_->memset(recurrent_[l].at(static_cast<size_t>(s.slot) * n), 0, n);
    backend_->memset(saved_[l].at(static_cast<size_t>(s.slot) * n), 0, n);
  }
  sequences_.push_back(std::move(s));
  return static_cast<uint32_t>(sequences_.size() - 1);
}

uint32_t StatePool::fork(uint32_t parent) {
  sequence(parent);
  Sequence child;
  child.slot = take_slot(("a fork of sequence " + std::to_string(parent)).c_str());
  const Sequence& p = sequences_[parent];
  child.length = p.length;
  child.checkpoint = p.checkpoint;
  // The blocks holding the parent's tokens, not those it reserved past them.
  const auto used = static_cast<size_t>(blocks_for(p.length, shape_.block_size));
  child.blocks.assign(p.blocks.begin(), p.blocks.begin() + static_cast<std::ptrdiff_t>(used));
  for (int32_t b : child.blocks) ++refs_[static_cast<size_t>(b)];
  if (child.slot >= 0) {
    copy_states(recurrent_, child.slot, recurrent_, p.slot);
    copy_states(saved_, child.slot, saved_, p.slot);
  }
  sequences_.push_back(std::move(child));
  return static_cast<uint32_t>(sequences_.size() - 1);
}

uint64_t StatePool::blocks_to_append(uint32_t seq, uint32_t tokens) const {
  const Sequence& s = sequence(seq);
  if (tokens == 0) return 0;
  const uint64_t total = blocks_for(uint64_t{s.length} + tokens, shape_.block_size);
  const uint64_t grow = total > s.blocks.size() ? total - s.blocks.size() : 0;
  const size_t written = s.length / shape_.block_size;  // the block the first new token goes into
  const bool copy_on_write = written < s.blocks.size() && refs_[static_cast<size_t>(s.blocks[written])] > 1;
  return grow + (copy_on_write ? 1 : 0);
}

std::vector<int32_t> StatePool::append(uint32_t seq, uint32_t tokens) {
  const uint64_t needed_blocks = blocks_to_append(seq, tokens);
  Sequence& s = sequences_[seq];
  const uint64_t bs = shape_.block_size;
  if (needed_blocks > free_.size())
    throw Error(Status::out_of_memory, "StatePool: sequence " + std::to_string(seq) + " (length " + std::to_string(s.length) +
                                           ") asks for " + std::to_string(tokens) + " tokens, which need " +
                                           std::to_string(needed_blocks) + " new blocks of block_size " +
                                           std::to_string(bs) + "; " + std::to_string(free_.size()) + " of " +
                                           std::to_string(shape_.num_blocks) + " blocks are free");
  if (tokens == 0) return {};
  const size_t written = s.length / bs;
  if (written < s.blocks.size() && refs_[static_cast<size_t>(s.blocks[written])] > 1) {
    // Copy on write: the tokens before length in that block stay the other holders' too.
    const int32_t shared = s.blocks[written], own = take_block();
    const uint64_t n = shape_.block_bytes();
    for (uint32_t l = 0; l < shape_.layers; ++l) {
      backend_->copy_device(k_[l].at(static_cast<size_t>(own) * n), k_[l].at(static_cast<size_t>(shared) * n), n);
      backend_->copy_device(v_[l].at(static_cast<size_t>(own) * n), v_[l].at(static_cast<size_t>(shared) * n), n);
    }
    drop_block(shared);
    s.blocks[written] = own;
  }
  while (s.blocks.size() < blocks_for(uint64_t{s.length} + tokens, bs)) s.blocks.push_back(take_block());
  std::vector<int32_t> slots(tokens);
  for (uint32_t t = 0; t < tokens; ++t) {
    const uint32_t pos = s.length + t;
    slots[t] = s.blocks[pos / bs] * static_cast<int32_t>(bs) + static_cast<int32_t>(pos % bs);
  }
  s.length += tokens;
  return slots;
}

void StatePool::checkpoint(uint32_t seq) {
  Sequence& s = sequence(seq);
  s.checkpoint = s.length;
  if (s.slot >= 0) copy_states(saved_, s.slot, recurrent_, s.slot);
}

uint32_t StatePool::rollback(uint32_t seq, uint32_t k) {
  Sequence& s = sequence(seq);
  if (k > s.length) {
    throw Error(Status::invalid_argument, "StatePool: sequence " + std::to_string(seq) + " has " + std::to_string(s.length) +
                                              " tokens; it cannot roll back " + std::to_string(k));
  }
  if (k == 0) return 0;
  const uint32_t target = s.length - k;
  uint32_t kept = target, replay = 0;
  if (s.slot >= 0) {
    if (target < s.checkpoint) {
      throw Error(Status::invalid_argument, "StatePool: sequence " + std::to_string(seq) + " rolls back " + std::to_string(k) +
                                                " of its " + std::to_string(s.length) + " tokens, before its checkpoint at " +
                                                std::to_string(s.checkpoint) + ": a recurrent state returns only to its checkpoint");
    }
    kept = s.checkpoint;
    replay = target - s.checkpoint;
    copy_states(recurrent_, s.slot, saved_, s.slot);
  }
  s.length = kept;
  const auto used = static_cast<size_t>(blocks_for(kept, shape_.block_size));
  while (s.blocks.size() > used) {
    drop_block(s.blocks.back());
    s.blocks.pop_back();
  }
  return replay;
}

void StatePool::release(uint32_t seq) {
  Sequence& s = sequence(seq);
  for (int32_t b : s.blocks) drop_block(b);
  if (s.slot >= 0) push_sorted(free_slots_, s.slot);
  s = Sequence{};
  s.live = false;
}

uint32_t StatePool::length(uint32_t seq) const { return sequence(seq).length; }

std::span<const int32_t> StatePool::block_table(uint32_t seq) const { return sequence(seq).blocks; }

uint32_t StatePool::block_refs(int32_t block) const {
  if (block < 0 || static_cast<size_t>(block) >= refs_.size())
    throw Error(Status::invalid_argument, "StatePool: no block " + std::to_string(block));
  return refs_[static_cast<size_t>(block)];
}

DevicePtr StatePool::recurrent_state(uint32_t layer, uint32_t seq) const {
  const Sequence& s = sequence(seq);
  return recurrent_slots(layer).offset(static_cast<uint64_t>(s.slot) * shape_.recurrent.bytes);
}

DevicePtr StatePool::recurrent_slots(uint32_t layer) const {
  if (layer >= shape_.recurrent.layers)
    throw Error(Status::invalid_argument, "StatePool: no recurrent layer " + std::to_string(layer) + " (the pool has " +
                                              std::to_string(shape_.recurrent.layers) + ")");
  return recurrent_[layer].ptr();
}

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
