// SPDX-License-Identifier: MIT OR Apache-2.0
// The double-precision reference of the attn kernels (docs/kernels.md, "Attention"): softmax
// attention of bf16 queries over a paged bf16 KV cache, every sum and exp in double, nothing
// rounded but the inputs. kv_append is a copy and needs none: its tests compare bytes.
//
// Tolerance: an output element o of reference r = sum_j w_j v_j passes when
//     |o - r| <= 2^-8 |r| + (2^-8 + 2 E) sum_j w_j |v_j|,   E = 2^-16 |scale| max_j sum_i |q_i k_ji|
// 2^-8 |r| covers the bf16 output (half an ulp is 2^-9) and the f32 accumulation; 2^-8 w_j |v_j|
// covers probabilities rounded to bf16 before they meet V (transformers' eager attention rounds
// the normalised weights to the query dtype, a flash kernel its tile's probabilities); E bounds
// the error of an f32 score (head_dim products summed in f32), which moves w_j by up to 2E
// relative.
#pragma once

#include "reference/reference.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace metrale::layers {

inline constexpr double kAttnRelTolerance = 0x1.0p-8;
inline constexpr double kAttnWeightTolerance = 0x1.0p-8;
inline constexpr double kAttnScoreTolerance = 0x1.0p-16;

// The paged cache: K and V pools bf16 [num_blocks][kv_heads][block_size][head_dim].
struct PagedKvView {
  std::span<const uint16_t> k_cache, v_cache;
  uint32_t kv_heads = 0, head_dim = 0, block_size = 0;
};

// Block tables for sequences of `lengths` tokens whose blocks are taken from the pool in `order`
// (a permutation of the pool's blocks, shuffled by the caller so that no sequence is contiguous),
// and the slot of every position, sequence after sequence: how the attn tests lay out a cache.
struct PagedTables {
  uint32_t max_blocks = 0;      // a table row: the longest sequence's blocks
  std::vector<int32_t> tables;  // [seqs][max_blocks], 0 past a sequence's blocks
  std::vector<int32_t> slots;   // [sum of lengths]
};
// The blocks the sequences take together.
uint32_t paged_blocks_needed(std::span<const uint32_t> lengths, uint32_t block_size);
PagedTables paged_tables(std::span<const uint32_t> lengths, uint32_t block_size, std::span<const int32_t> order);
// Where head `head` of slot `slot` starts in a pool.
inline size_t paged_element(uint32_t slot, uint32_t head, uint32_t kv_heads, uint32_t block_size, uint32_t head_dim) {
  return ((size_t{slot / block_size} * kv_heads + head) * block_size + slot % block_size) * head_dim;
}

// Query rows q bf16 [rows][q_heads][head_dim]; row r attends to positions 0..context[r]-1 of
// the sequence whose block table is tables[r * max_blocks, ...). Output [rows][q_heads*head_dim].
// Decode: one row per sequence; prefill: row i of a chunk after `past` tokens has context
// past + i + 1 and its sequence's table.
ReferenceOutput reference_paged_attention(std::span<const uint16_t> q, uint32_t rows, uint32_t q_heads,
                                          const PagedKvView& kv, std::span<const int32_t> tables, uint32_t max_blocks,
                                          std::span<const uint32_t> context, float scale);

}  // namespace metrale::layers
