// SPDX-License-Identifier: MIT OR Apache-2.0
// The state a model's layers keep per sequence, one pool for all of it (as vLLM's per-layer cache
// specs and llama.cpp's memory for KV, recurrent and hybrid state):
//   - full attention: a paged KV cache (docs/kernels.md, "Module attn"): one K and one V pool per
//     attention layer, fixed blocks handed out to sequences as they grow, and the block tables and
//     slot mappings the attn kernels read. A block number means the same block in every layer's
//     pools, so one block table per sequence serves all layers (as vLLM's does). Blocks are
//     reference-counted: a fork shares its parent's blocks and copies one only when it writes into
//     it (copy on write);
//   - a linear (recurrent) mixer: a fixed number of bytes per sequence and layer, whatever its
//     length (a DeltaNet layer's convolution window and recurrent matrix), in one slot per live
//     sequence, zeroed when the sequence starts, copied when it is forked;
//   - an FFN: nothing.
// Rolling back: attention forgets the last k tokens exactly by shortening the sequence; a recurrent
// state cannot subtract tokens, so it returns to the sequence's last checkpoint() and the caller
// feeds again the tokens kept after it (rollback() says how many).
// Host-side bookkeeping plus device copies (fork's and copy on write's); no kernel is launched.
// Not thread-safe; one owner. The Backend must outlive the pool.
#pragma once

#include "core/device_buffer.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace metrale::layers {

// The per-sequence state of the recurrent layers: `bytes` per sequence in each of `layers` layers,
// for at most `max_sequences` live sequences. layers 0: the model has none.
struct RecurrentStateShape {
  uint32_t layers = 0;
  uint64_t bytes = 0;
  uint32_t max_sequences = 0;
};

struct StatePoolShape {
  uint32_t kv_heads = 0, head_dim = 0, block_size = 0, num_blocks = 0;
  uint32_t layers = 1;  // pools per pool kind: one K and one V pool per attention layer
  RecurrentStateShape recurrent = {};
  // Tokens the cache holds per sequence when one sequence has every block.
  uint64_t capacity_tokens() const noexcept { return uint64_t{num_blocks} * block_size; }
  // Bytes of one block in one layer's K (or V) pool.
  uint64_t block_bytes() const noexcept { return uint64_t{kv_heads} * block_size * head_dim * kBf16; }
  // Device bytes the pool allocates: the KV pools, then the recurrent slots with their checkpoints.
  uint64_t bytes() const noexcept;
};

class StatePool {
 public:
  // Allocates the K and V pools of every layer, each bf16 [num_blocks][kv_heads][block_size]
  // [head_dim], and the recurrent slots. Throws Error (invalid_argument) for a shape the attn
  // kernels refuse: head_dim other than 64, 128 or 256, block_size not a power of two from 1 to 256,
  // zero heads, blocks or layers; recurrent layers without bytes or slots.
  StatePool(Backend& backend, const StatePoolShape& shape);

  // A new, empty sequence; its id. `reserve_tokens`: blocks for that many tokens are taken now, so
  // its first appends cannot fail. A pool that cannot take it (too few free blocks, no free
  // recurrent slot) throws Error (out_of_memory) naming the sizes asked for and free, and no
  // running sequence is touched.
  uint32_t add_sequence(uint32_t reserve_tokens = 0);
  // A new sequence continuing `parent`: the same tokens, sharing the parent's blocks (nothing is
  // copied until one of the two writes into a shared block), the recurrent state and checkpoint
  // copied. Error (out_of_memory) when no recurrent slot is free.
  uint32_t fork(uint32_t parent);
  // Room for `tokens` more tokens of sequence `seq`: the slots of positions length .. length +
  // tokens - 1 (what kv_append takes), blocks taken from the free list as needed, a shared block
  // written into copied first. When too few blocks are free, throws Error (out_of_memory) naming
  // the tokens asked for, the blocks that needs, those free and block_size, and changes nothing.
  std::vector<int32_t> append(uint32_t seq, uint32_t tokens);
  // New blocks append(seq, tokens) would take (a copy on write counted).
  uint64_t blocks_to_append(uint32_t seq, uint32_t tokens) const;
  // The sequence's present length and recurrent state become what rollback() returns to.
  void checkpoint(uint32_t seq);
  // Forgets the last `k` tokens of `seq` (k <= its length). Without recurrent layers: exact now,
  // blocks past the new length freed; returns 0. With them: the recurrent state and the length go
  // back to the last checkpoint (k must not reach before it), and the result is the number of
  // tokens after the checkpoint the caller feeds again to reach length - k.
  uint32_t rollback(uint32_t seq, uint32_t k);
  // The sequence's blocks and recurrent slot back to the pool; its id is not reused.
  void release(uint32_t seq);

  uint32_t length(uint32_t seq) const;
  bool live(uint32_t seq) const noexcept { return seq < sequences_.size() && sequences_[seq].live; }
  // The sequence's physical blocks in logical order (attn_prefill's block_table).
  std::span<const int32_t> block_table(uint32_t seq) const;
  // Sequences holding `block` (0 when free).
  uint32_t block_refs(int32_t block) const;
  // attn_decode's block_tables i32 [seqs.size()][max_blocks] (entries past a sequence's blocks
  // are 0, never read) and context_lens i32 [seqs.size()]; max_blocks is the longest table.
  struct DecodeTables {
    std::vector<int32_t> block_tables, context_lens;
    uint32_t max_blocks = 0;
  };
  DecodeTables decode_tables(std::span<const uint32_t> seqs) const;

  uint32_t free_blocks() const noexcept { return static_cast<uint32_t>(free_.size()); }
  uint32_t free_recurrent_slots() const noexcept { return static_cast<uint32_t>(free_slots_.size()); }
  const StatePoolShape& shape() const noexcept { return shape_; }
  // Layer `layer`'s pools (layer < shape().layers).
  DevicePtr k_cache(uint32_t layer = 0) const noexcept { return k_[layer].ptr(); }
  DevicePtr v_cache(uint32_t layer = 0) const noexcept { return v_[layer].ptr(); }
  // Recurrent layer `layer`'s state of `seq`: shape().recurrent.bytes the layer reads and updates.
  DevicePtr recurrent_state(uint32_t layer, uint32_t seq) const;
  // The slot holding `seq`'s recurrent state (its offset in every recurrent layer's slots), and
  // layer `layer`'s slot 0: the deltanet kernels address slot s at recurrent_slots(layer) + s * bytes.
  int32_t recurrent_slot(uint32_t seq) const { return sequence(seq).slot; }
  DevicePtr recurrent_slots(uint32_t layer) const;

 private:
  struct Sequence {
    uint32_t length = 0;
    std::vector<int32_t> blocks;
    bool live = true;
    int32_t slot = -1;             // recurrent slot; -1 without recurrent layers
    uint32_t checkpoint = 0;       // length at the last checkpoint()
  };
  const Sequence& sequence(uint32_t seq) const;
  Sequence& sequence(uint32_t seq);
  int32_t take_block();
  void drop_block(int32_t block);
  int32_t take_slot(const char* what);
  // Every recurrent layer's state in slot `from_slot` of `from` into slot `to_slot` of `to`.
  void copy_states(std::vector<DeviceBuffer>& to, int32_t to_slot, const std::vector<DeviceBuffer>& from, int32_t from_slot);

  Backend* backend_;
  StatePoolShape shape_;
  std::vector<DeviceBuffer> k_, v_;  // per attention layer
  std::vector<DeviceBuffer> recurrent_, saved_;  // per recurrent layer: [max_sequences][bytes], and the checkpoints'
  std::vector<uint32_t> refs_;       // per block: sequences holding it
  std::vector<int32_t> free_;        // a stack: the lowest block is handed out first
  std::vector<int32_t> free_slots_;  // likewise for recurrent slots
  std::vector<Sequence> sequences_;
};

}  // namespace metrale::layers
