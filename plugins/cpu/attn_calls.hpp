// SPDX-License-Identifier: MIT OR Apache-2.0
// The attn module's launch arguments, decoded once for the validators (attn_table.cpp) and the
// bodies (attn_baseline.cpp). The paged KV cache (docs/kernels.md, "Attention"): K and V pools
// bf16 [num_blocks][kv_heads][block_size][head_dim], so one (block, kv head) is block_size *
// head_dim contiguous elements; slot s is token s % block_size of physical block s / block_size.
// Internal linkage, as kernels.hpp.
#pragma once

#include "kernels.hpp"

namespace metrale::cpu {
namespace {

// What every attn kernel says about the cache.
struct KvShape {
  uint32_t kv_heads, head_dim, block_size, num_blocks;
  size_t block_elems() const { return size_t{kv_heads} * block_size * head_dim; }
  // Element offset of token `offset` of physical block `block`, kv head `head`.
  size_t at(uint32_t block, uint32_t head, uint32_t offset) const {
    return block * block_elems() + (size_t{head} * block_size + offset) * head_dim;
  }
};

// kv_append: (k, v, slot_mapping, k_cache, v_cache, tokens, kv_heads, head_dim, block_size, num_blocks).
struct KvAppendCall {
  const uint16_t* k;
  const uint16_t* v;
  const int32_t* slots;
  uint16_t* k_cache;
  uint16_t* v_cache;
  uint32_t tokens;
  KvShape kv;
};
inline KvAppendCall kv_append_call(const KernelArgs& a) {
  return {arg_ptr<const uint16_t>(a, 0), arg_ptr<const uint16_t>(a, 1), arg_ptr<const int32_t>(a, 2),
          arg_ptr<uint16_t>(a, 3),       arg_ptr<uint16_t>(a, 4),       arg_u32(a, 5),
          {arg_u32(a, 6), arg_u32(a, 7), arg_u32(a, 8), arg_u32(a, 9)}};
}

// attn_decode: (q, k_cache, v_cache, block_tables, context_lens, partials, seqs, q_heads,
// kv_heads, head_dim, block_size, max_blocks, num_blocks, scale).
struct DecodeCall {
  const uint16_t* q;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  const int32_t* block_tables;
  const int32_t* context_lens;
  float* partials;
  uint32_t seqs, q_heads;
  KvShape kv;
  uint32_t max_blocks;
  float scale;
  uint32_t partitions() const { return ceil_partitions(max_blocks * block_size()); }
  uint32_t block_size() const { return kv.block_size; }
  static uint32_t ceil_partitions(uint64_t tokens) {
    return static_cast<uint32_t>((tokens + kAttnPartition - 1) / kAttnPartition);
  }
};
inline DecodeCall decode_call(const KernelArgs& a) {
  return {arg_ptr<const uint16_t>(a, 0), arg_ptr<const uint16_t>(a, 1), arg_ptr<const uint16_t>(a, 2),
          arg_ptr<const int32_t>(a, 3),  arg_ptr<const int32_t>(a, 4),  arg_ptr<float>(a, 5),
          arg_u32(a, 6),                 arg_u32(a, 7),
          {arg_u32(a, 8), arg_u32(a, 9), arg_u32(a, 10), arg_u32(a, 12)},
          arg_u32(a, 11),                arg_f32(a, 13)};
}

// One split's record in partials f32 [seqs][q_heads][partitions][head_dim + 2]: the split's
// score maximum, its sum of exp(score - maximum), then head_dim unnormalised accumulators.
inline size_t partial_stride(uint32_t head_dim) { return size_t{head_dim} + 2; }

// attn_decode_combine: (partials, context_lens, out, seqs, q_heads, head_dim, partitions).
struct CombineCall {
  const float* partials;
  const int32_t* context_lens;
  uint16_t* out;
  uint32_t seqs, q_heads, head_dim, partitions;
};
inline CombineCall combine_call(const KernelArgs& a) {
  return {arg_ptr<const float>(a, 0), arg_ptr<const int32_t>(a, 1), arg_ptr<uint16_t>(a, 2),
          arg_u32(a, 3),              arg_u32(a, 4),                arg_u32(a, 5),
          arg_u32(a, 6)};
}

// attn_prefill: (q, k_cache, v_cache, block_table, out, m, past, q_heads, kv_heads, head_dim,
// block_size, num_blocks, scale).
struct PrefillCall {
  const uint16_t* q;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  const int32_t* block_table;
  uint16_t* out;
  uint32_t m, past, q_heads;
  KvShape kv;
  float scale;
};
inline PrefillCall prefill_call(const KernelArgs& a) {
  return {arg_ptr<const uint16_t>(a, 0), arg_ptr<const uint16_t>(a, 1), arg_ptr<const uint16_t>(a, 2),
          arg_ptr<const int32_t>(a, 3),  arg_ptr<uint16_t>(a, 4),       arg_u32(a, 5),
          arg_u32(a, 6),                 arg_u32(a, 7),
          {arg_u32(a, 8), arg_u32(a, 9), arg_u32(a, 10), arg_u32(a, 11)},
          arg_f32(a, 12)};
}

}  // namespace
}  // namespace metrale::cpu
