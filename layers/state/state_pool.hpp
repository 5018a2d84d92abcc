// SPDX-License-Identifier: MIT OR Apache-2.0
// The state a model's layers keep per sequence; today the paged KV cache of its attention layers
// (docs/kernels.md, "Module attn"): one K and one V pool per layer on a Backend, fixed blocks handed out to sequences as they grow, and the
// block tables and slot mappings the attn kernels read. A block number means the same block in
// every layer's pools, so one block table per sequence serves all layers (as vLLM's does).
// Host-side bookkeeping only: nothing here launches a kernel. Not thread-safe; one owner.
#pragma once

#include "core/device_buffer.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace metrale::layers {

struct StatePoolShape {
  uint32_t kv_heads = 0, head_dim = 0, block_size = 0, num_blocks = 0;
  uint32_t layers = 1;  // pools per pool kind: one K and one V pool per attention layer
  // Tokens the cache holds per sequence when one sequence has every block.
  uint64_t capacity_tokens() const noexcept { return uint64_t{num_blocks} * block_size; }
};

class StatePool {
 public:
  // Allocates the K and V pools of every layer, each bf16 [num_blocks][kv_heads][block_size]
  // [head_dim]. Throws Error (invalid_argument) for a shape the attn kernels refuse: head_dim
  // other than 64 or 128, block_size not a power of two from 1 to 256, zero heads, blocks or
  // layers.
  StatePool(Backend& backend, const StatePoolShape& shape);

  // A new, empty sequence; its id.
  uint32_t add_sequence();
  // Room for `tokens` more tokens of sequence `seq`: the slots of positions length .. length +
  // tokens - 1 (what kv_append takes), blocks taken from the free list as needed. When too few
  // blocks are free, throws Error (out_of_memory) naming the tokens asked for, the blocks that
  // needs, those free and block_size, and changes nothing.
  std::vector<int32_t> append(uint32_t seq, uint32_t tokens);
  // The sequence's blocks back to the free list; its id is not reused.
  void release(uint32_t seq);

  uint32_t length(uint32_t seq) const;
  // The sequence's physical blocks in logical order (attn_prefill's block_table).
  std::span<const int32_t> block_table(uint32_t seq) const;
  // attn_decode's block_tables i32 [seqs.size()][max_blocks] (entries past a sequence's blocks
  // are 0, never read) and context_lens i32 [seqs.size()]; max_blocks is the longest table.
  struct DecodeTables {
    std::vector<int32_t> block_tables, context_lens;
    uint32_t max_blocks = 0;
  };
  DecodeTables decode_tables(std::span<const uint32_t> seqs) const;

  uint32_t free_blocks() const noexcept { return static_cast<uint32_t>(free_.size()); }
  const StatePoolShape& shape() const noexcept { return shape_; }
  // Layer `layer`'s pools (layer < shape().layers).
  DevicePtr k_cache(uint32_t layer = 0) const noexcept { return k_[layer].ptr(); }
  DevicePtr v_cache(uint32_t layer = 0) const noexcept { return v_[layer].ptr(); }

 private:
  struct Sequence {
    uint32_t length = 0;
    std::vector<int32_t> blocks;
    bool live = true;
  };
  const Sequence& sequence(uint32_t seq) const;

  StatePoolShape shape_;
  std::vector<DeviceBuffer> k_, v_;  // per layer
  std::vector<int32_t> free_;  // a stack: the lowest block is handed out first
  std::vector<Sequence> sequences_;
};

}  // namespace metrale::layers
