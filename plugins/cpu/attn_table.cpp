// SPDX-License-Identifier: MIT OR Apache-2.0
#include "attn_table.hpp"

#include "attn_calls.hpp"
#include "launch_checks.hpp"

#include <cmath>

namespace metrale::cpu {

namespace {

// Keeps every token position and element offset of one sequence far inside 32 bits.
constexpr uint64_t kMaxContext = uint64_t{1} << 24;
constexpr uint32_t kMaxBlockSize = 256;

std::string num(uint64_t value) { return std::to_string(value); }

bool head_dim_ok(uint32_t head_dim, std::string& error) {
  if (head_dim == 64 || head_dim == 128 || head_dim == 256) return true;
  error = "head_dim must be 64, 128 or 256 (got head_dim=" + num(head_dim) + ")";
  return false;
}

// The cache's shape arguments and both pools: head_dim 64, 128 or 256, block_size a power of two
// up to 256 (so it divides attn_decode's 512-token splits), each pool num_blocks blocks.
bool cache_ok(const KernelArgs& a, const MemoryView& mem, unsigned k_index, unsigned v_index, const KvShape& kv,
              std::string& error) {
  if (!at_least_one({{"kv_heads", kv.kv_heads}, {"num_blocks", kv.num_blocks}}, error)) return false;
  if (!head_dim_ok(kv.head_dim, error)) return false;
  if (kv.block_size == 0 || kv.block_size > kMaxBlockSize || (kv.block_size & (kv.block_size - 1)) != 0) {
    error = "block_size must be a power of two from 1 to 256 (got block_size=" + num(kv.block_size) + ")";
    return false;
  }
  const uint64_t bytes = product({kv.num_blocks, kv.kv_heads, kv.block_size, kv.head_dim, 2});
  return buffer(a, mem, k_index, "k_cache", bytes, "num_blocks*kv_heads*block_size*head_dim bf16", error) &&
         buffer(a, mem, v_index, "v_cache", bytes, "num_blocks*kv_heads*block_size*head_dim bf16", error);
}

// q_heads a positive multiple of kv_heads, few enough per kv head for a block's scratch.
bool heads_ok(uint32_t q_heads, uint32_t kv_heads, std::string& error) {
  if (q_heads == 0 || q_heads % kv_heads != 0 || q_heads / kv_heads > 128) {
    error = "q_heads must be a positive multiple of kv_heads, at most 128 times it (got q_heads=" + num(q_heads) +
            ", kv_heads=" + num(kv_heads) + ")";
    return false;
  }
  return true;
}

bool scale_ok(float scale, std::string& error) {
  if (!std::isfinite(scale)) {
    error = "scale must be finite (got " + std::to_string(scale) + ")";
    return false;
  }
  return true;
}

// Entries [0, count) of a block table name physical blocks of the pool.
bool table_ok(const int32_t* table, uint32_t count, uint32_t num_blocks, const char* name, uint32_t seq,
              bool per_seq, std::string& error) {
  for (uint32_t b = 0; b < count; ++b) {
    if (table[b] < 0 || static_cast<uint32_t>(table[b]) >= num_blocks) {
      error = name;
      if (per_seq) error += '[' + num(seq) + ']';
      error += '[' + num(b) + "] = " + std::to_string(table[b]) + " is not a block of the pool (num_blocks=" +
               num(num_blocks) + ")";
      return false;
    }
  }
  return true;
}

metrale_status check_kv_append(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const KvAppendCall c = kv_append_call(a);
  if (!at_least_one({{"tokens", c.tokens}}, error) || !cache_ok(a, mem, 3, 4, c.kv, error)) return kInvalid;
  const uint64_t rows = product({c.tokens, c.kv.kv_heads, c.kv.head_dim, 2});
  if (!buffer(a, mem, 0, "k", rows, "tokens*kv_heads*head_dim bf16", error) ||
      !buffer(a, mem, 1, "v", rows, "tokens*kv_heads*head_dim bf16", error) ||
      !buffer(a, mem, 2, "slot_mapping", product({c.tokens, 4}), "tokens i32", error))
    return kInvalid;
  const uint64_t slots = uint64_t{c.kv.num_blocks} * c.kv.block_size;
  for (uint32_t t = 0; t < c.tokens; ++t) {
    if (c.slots[t] < 0 || static_cast<uint64_t>(c.slots[t]) >= slots) {
      error = "slot_mapping[" + num(t) + "] = " + std::to_string(c.slots[t]) +
              " is not a slot of the pool (num_blocks*block_size = " + num(c.kv.num_blocks) + "*" +
              num(c.kv.block_size) + " = " + num(slots) + ")";
      return kInvalid;
    }
  }
  needed = {c.tokens, 1};
  return kOk;
}

metrale_status check_decode(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const DecodeCall c = decode_call(a);
  if (!at_least_one({{"seqs", c.seqs}, {"max_blocks", c.max_blocks}}, error) ||
      !cache_ok(a, mem, 1, 2, c.kv, error) || !heads_ok(c.q_heads, c.kv.kv_heads, error) ||
      !scale_ok(c.scale, error))
    return kInvalid;
  const uint64_t max_context = uint64_t{c.max_blocks} * c.kv.block_size;
  if (max_context > kMaxContext) {
    error = "max_blocks*block_size must be at most 2^24 tokens (got " + num(c.max_blocks) + "*" +
            num(c.kv.block_size) + ")";
    return kInvalid;
  }
  const uint32_t d = c.kv.head_dim;
  if (!buffer(a, mem, 0, "q", product({c.seqs, c.q_heads, d, 2}), "seqs*q_heads*head_dim bf16", error) ||
      !buffer(a, mem, 3, "block_tables", product({c.seqs, c.max_blocks, 4}), "seqs*max_blocks i32", error) ||
      !buffer(a, mem, 4, "context_lens", product({c.seqs, 4}), "seqs i32", error) ||
      !buffer(a, mem, 5, "partials", product({c.seqs, c.q_heads, c.partitions(), partial_stride(d), 4}),
              "seqs*q_heads*ceil(max_blocks*block_size/512)*(head_dim+2) f32", error))
    return kInvalid;
  for (uint32_t s = 0; s < c.seqs; ++s) {
    const int32_t len = c.context_lens[s];
    if (len < 1 || static_cast<uint64_t>(len) > max_context) {
      error = "context_lens[" + num(s) + "] = " + std::to_string(len) + " must be 1..max_blocks*block_size = " +
              num(max_context);
      return kInvalid;
    }
    const uint32_t used = (static_cast<uint32_t>(len) + c.kv.block_size - 1) / c.kv.block_size;
    if (!table_ok(c.block_tables + size_t{s} * c.max_blocks, used, c.kv.num_blocks, "block_tables", s, true, error))
      return kInvalid;
  }
  if (product({c.seqs, c.kv.kv_heads}) > UINT32_MAX) {
    error = "seqs*kv_heads must fit in 32 bits (got seqs=" + num(c.seqs) + ", kv_heads=" + num(c.kv.kv_heads) + ")";
    return kInvalid;
  }
  needed = {c.partitions(), c.seqs * c.kv.kv_heads};
  return kOk;
}

metrale_status check_combine(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const CombineCall c = combine_call(a);
  if (!at_least_one({{"seqs", c.seqs}, {"q_heads", c.q_heads}, {"partitions", c.partitions}}, error))
    return kInvalid;
  if (!head_dim_ok(c.head_dim, error)) return kInvalid;
  if (!buffer(a, mem, 0, "partials", product({c.seqs, c.q_heads, c.partitions, partial_stride(c.head_dim), 4}),
              "seqs*q_heads*partitions*(head_dim+2) f32", error) ||
      !buffer(a, mem, 1, "context_lens", product({c.seqs, 4}), "seqs i32", error) ||
      !buffer(a, mem, 2, "out", product({c.seqs, c.q_heads, c.head_dim, 2}), "seqs*q_heads*head_dim bf16", error))
    return kInvalid;
  const uint64_t max_context = uint64_t{c.partitions} * kAttnPartition;
  for (uint32_t s = 0; s < c.seqs; ++s) {
    const int32_t len = c.context_lens[s];
    if (len < 1 || static_cast<uint64_t>(len) > max_context) {
      error = "context_lens[" + num(s) + "] = " + std::to_string(len) + " must be 1..partitions*512 = " +
              num(max_context);
      return kInvalid;
    }
  }
  needed = {c.q_heads, c.seqs};
  return kOk;
}

metrale_status check_prefill(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const PrefillCall c = prefill_call(a);
  if (!at_least_one({{"m", c.m}}, error) || !cache_ok(a, mem, 1, 2, c.kv, error) ||
      !heads_ok(c.q_heads, c.kv.kv_heads, error) || !scale_ok(c.scale, error))
    return kInvalid;
  const uint64_t context = uint64_t{c.past} + c.m;
  if (context > kMaxContext) {
    error = "past+m must be at most 2^24 tokens (got past=" + num(c.past) + ", m=" + num(c.m) + ")";
    return kInvalid;
  }
  const auto blocks = static_cast<uint32_t>((context + c.kv.block_size - 1) / c.kv.block_size);
  const uint64_t rows = product({c.m, c.q_heads, c.kv.head_dim, 2});
  if (!buffer(a, mem, 0, "q", rows, "m*q_heads*head_dim bf16", error) ||
      !buffer(a, mem, 3, "block_table", product({blocks, 4}), [&] {
        return "ceil((past+m)/block_size) = " + num(blocks) + " i32";
      }, error) ||
      !buffer(a, mem, 4, "out", rows, "m*q_heads*head_dim bf16", error) ||
      !table_ok(c.block_table, blocks, c.kv.num_blocks, "block_table", 0, false, error))
    return kInvalid;
  needed = {ceil_div(c.m, kAttnPrefillRows), c.kv.kv_heads};
  return kOk;
}

const KernelSpec kSpecs[] = {
    {METRALE_CPU_KERNEL(attn, kv_append), check_kv_append, baseline::kv_append, -1, "(tokens, 1)"},
    {METRALE_CPU_KERNEL(attn, attn_decode), check_decode, baseline::attn_decode,
     static_cast<int>(Simd::attn_decode),
     "(ceil(max_blocks*block_size/512), seqs*kv_heads)"},
    {METRALE_CPU_KERNEL(attn, attn_decode_combine), check_combine, baseline::attn_decode_combine, -1,
     "(q_heads, seqs)"},
    {METRALE_CPU_KERNEL(attn, attn_prefill), check_prefill, baseline::attn_prefill,
     static_cast<int>(Simd::attn_prefill),
     "(ceil(m/64), kv_heads)"},
};

}  // namespace

std::span<const KernelSpec> attn_kernel_specs() { return kSpecs; }

}  // namespace metrale::cpu
