// SPDX-License-Identifier: MIT OR Apache-2.0
// Baseline bodies of the attn module (docs/kernels.md, "Attention"): scores q.k in f32 from
// exact bf16 products, times `scale`, softmax in f32 (exp of score minus the running maximum),
// probabilities kept in f32 against V, one rounding to bf16 at the output. Arguments were
// validated by attn_table.cpp: shapes, every slot, block table entry and context length in range.
#include "attn_calls.hpp"
#include "kernels.hpp"
#include "numeric.hpp"

#include <cmath>
#include <limits>

namespace metrale::cpu::baseline {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void widen(const uint16_t* in, float* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = bf16_to_f32(in[i]);
}

float dot(const float* a, const float* b, uint32_t n) {
  float sum = 0.0f;
  for (uint32_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Online softmax state of one query row: running maximum, sum and unnormalised output.
struct Online {
  float max = kNegInf;
  float sum = 0.0f;
};

// Folds `n` scores (already scaled) and their V rows `v` (n x d, f32) into state and acc[d].
void fold(Online& state, float* acc, const float* scores, const float* v, uint32_t n, uint32_t d) {
  float top = state.max;
  for (uint32_t t = 0; t < n; ++t) top = scores[t] > top ? scores[t] : top;
  if (top != state.max) {
    const float alpha = state.max == kNegInf ? 0.0f : std::exp(state.max - top);
    state.sum *= alpha;
    for (uint32_t i = 0; i < d; ++i) acc[i] *= alpha;
    state.max = top;
  }
  for (uint32_t t = 0; t < n; ++t) {
    const float p = std::exp(scores[t] - top);
    state.sum += p;
    for (uint32_t i = 0; i < d; ++i) acc[i] += p * v[size_t{t} * d + i];
  }
}

}  // namespace

// Block (bx, 1): token bx's K and V rows into their slot.
void kv_append(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const KvAppendCall c = kv_append_call(args);
  const auto slot = static_cast<uint32_t>(c.slots[bx]);
  const uint32_t block = slot / c.kv.block_size, offset = slot % c.kv.block_size;
  const size_t row = size_t{c.kv.kv_heads} * c.kv.head_dim;
  for (uint32_t h = 0; h < c.kv.kv_heads; ++h) {
    const size_t from = bx * row + size_t{h} * c.kv.head_dim, to = c.kv.at(block, h, offset);
    std::memcpy(c.k_cache + to, c.k + from, size_t{c.kv.head_dim} * 2);
    std::memcpy(c.v_cache + to, c.v + from, size_t{c.kv.head_dim} * 2);
  }
}

namespace {

// Split bx ([begin, begin + n) of the context) of sequence `seq` for q heads [first_head,
// first_head + group) of kv head `kv_head`: their records of split bx.
void decode_heads(const DecodeCall& c, uint32_t seq, uint32_t kv_head, uint32_t bx, uint32_t first_head, uint32_t group,
                  uint32_t n, unsigned char* scratch) {
  const uint32_t begin = bx * kAttnPartition, d = c.kv.head_dim, bs = c.kv.block_size;
  // Scratch: q [group][d], scores [group][512], one K or V row [d], acc [group][d].
  float* q = scratch_at<float>(scratch, 0);
  float* scores = q + size_t{group} * d;
  float* row = scores + size_t{group} * kAttnPartition;
  float* acc = row + d;
  widen(c.q + (size_t{seq} * c.q_heads + first_head) * d, q, size_t{group} * d);
  const int32_t* table = c.block_tables + size_t{seq} * c.max_blocks;
  // Splits start on block boundaries (block_size divides 512).
  for (uint32_t t = 0; t < n; ++t) {
    const uint32_t pos = begin + t;
    widen(c.k_cache + c.kv.at(static_cast<uint32_t>(table[pos / bs]), kv_head, pos % bs), row, d);
    for (uint32_t g = 0; g < group; ++g) scores[g * kAttnPartition + t] = dot(q + g * d, row, d) * c.scale;
  }
  for (uint32_t g = 0; g < group; ++g) {
    float top = kNegInf, sum = 0.0f;
    float* s = scores + g * kAttnPartition;
    for (uint32_t t = 0; t < n; ++t) top = s[t] > top ? s[t] : top;
    for (uint32_t t = 0; t < n; ++t) {
      s[t] = std::exp(s[t] - top);
      sum += s[t];
    }
    float* record = c.partials + ((size_t{seq} * c.q_heads + first_head + g) * c.partitions() + bx) * partial_stride(d);
    record[0] = top;
    record[1] = sum;
    for (uint32_t i = 0; i < d; ++i) acc[g * d + i] = 0.0f;
  }
  for (uint32_t t = 0; t < n; ++t) {
    const uint32_t pos = begin + t;
    widen(c.v_cache + c.kv.at(static_cast<uint32_t>(table[pos / bs]), kv_head, pos % bs), row, d);
    for (uint32_t g = 0; g < group; ++g) {
      const float p = scores[g * kAttnPartition + t];
      for (uint32_t i = 0; i < d; ++i) acc[g * d + i] += p * row[i];
    }
  }
  for (uint32_t g = 0; g < group; ++g) {
    float* record = c.partials + ((size_t{seq} * c.q_heads + first_head + g) * c.partitions() + bx) * partial_stride(d);
    for (uint32_t i = 0; i < d; ++i) record[2 + i] = acc[g * d + i];
  }
}

}  // namespace

// Block (bx, by): split bx (context tokens [bx*512, bx*512 + 512)) of sequence by / kv_heads
// for the q heads sharing kv head by % kv_heads; writes those heads' records of split bx. At
// head_dim 256 at most 64 q heads at a time (their scratch), each slice reading the split again.
void attn_decode(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  const DecodeCall c = decode_call(args);
  const uint32_t seq = by / c.kv.kv_heads, kv_head = by % c.kv.kv_heads;
  const auto context = static_cast<uint32_t>(c.context_lens[seq]);
  const uint32_t begin = bx * kAttnPartition;
  if (begin >= context) return;  // the combine reads only the splits the context reaches
  const uint32_t n = min_u32(context, begin + kAttnPartition) - begin;
  const uint32_t group = c.q_heads / c.kv.kv_heads, slice = c.kv.head_dim > 128 ? 64 : group;
  for (uint32_t g0 = 0; g0 < group; g0 += slice)
    decode_heads(c, seq, kv_head, bx, kv_head * group + g0, min_u32(slice, group - g0), n, scratch);
}

// Block (bx, by): q head bx of sequence by, from the records of the splits its context reaches.
// Each split's weight e^(m - M) is taken once, not once per element (a 32k context has 64
// splits: an exp per element and split cost as much as the decode itself).
void attn_decode_combine(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  const CombineCall c = combine_call(args);
  const uint32_t splits = DecodeCall::ceil_partitions(static_cast<uint32_t>(c.context_lens[by]));
  const size_t stride = partial_stride(c.head_dim);
  const float* records = c.partials + (size_t{by} * c.q_heads + bx) * c.partitions * stride;
  // Scratch: the output [head_dim], then the weights of up to kPiece splits at a time (the
  // contract bounds a context by 2^31 tokens here, not by the scratch).
  constexpr uint32_t kPiece = 8192;
  float* value = scratch_at<float>(scratch, 0);
  float* weight = value + c.head_dim;
  float top = kNegInf;
  for (uint32_t p = 0; p < splits; ++p) top = records[p * stride] > top ? records[p * stride] : top;
  float sum = 0.0f;
  for (uint32_t i = 0; i < c.head_dim; ++i) value[i] = 0.0f;
  for (uint32_t first = 0; first < splits; first += kPiece) {
    const uint32_t count = min_u32(kPiece, splits - first);
    for (uint32_t p = 0; p < count; ++p) {
      const float* record = records + size_t{first + p} * stride;
      weight[p] = std::exp(record[0] - top);
      sum += record[1] * weight[p];
    }
    for (uint32_t p = 0; p < count; ++p) {
      const float* acc = records + size_t{first + p} * stride + 2;
      for (uint32_t i = 0; i < c.head_dim; ++i) value[i] += acc[i] * weight[p];
    }
  }
  uint16_t* out = c.out + (size_t{by} * c.q_heads + bx) * c.head_dim;
  for (uint32_t i = 0; i < c.head_dim; ++i) out[i] = f32_to_bf16(value[i] / sum);
}

// Block (bx, by): query rows [bx*64, bx*64 + 64) of the chunk for the q heads sharing kv head
// by; row i sits at position past + i and attends to cache positions 0..past + i. Each cache
// block is widened once per q head, in pieces of at most 32768 / head_dim positions (a whole
// block up to head_dim 128; the scratch holds K and V of 128 positions at 256), and each piece
// folded into every row that reaches it.
void attn_prefill(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  const PrefillCall c = prefill_call(args);
  const uint32_t first = bx * kAttnPrefillRows, rows = min_u32(c.m - first, kAttnPrefillRows);
  const uint32_t group = c.q_heads / c.kv.kv_heads, d = c.kv.head_dim, bs = c.kv.block_size;
  const uint32_t piece = min_u32(bs, 32768 / d);
  // Scratch: K and V piece [piece][d], q [64][d], acc [64][d], scores [piece], states [64].
  float* k = scratch_at<float>(scratch, 0);
  float* v = k + size_t{piece} * d;
  float* q = v + size_t{piece} * d;
  float* acc = q + size_t{kAttnPrefillRows} * d;
  float* scores = acc + size_t{kAttnPrefillRows} * d;
  Online* state = reinterpret_cast<Online*>(scores + piece);
  const uint32_t last = c.past + first + rows - 1;  // the block's last position
  for (uint32_t g = 0; g < group; ++g) {
    const uint32_t head = by * group + g;
    for (uint32_t r = 0; r < rows; ++r) {
      widen(c.q + (size_t{first + r} * c.q_heads + head) * d, q + size_t{r} * d, d);
      for (uint32_t i = 0; i < d; ++i) acc[size_t{r} * d + i] = 0.0f;
      state[r] = Online{};
    }
    for (uint32_t start = 0; start <= last; start += piece) {
      const uint32_t b = start / bs, len = min_u32(piece, bs - start % bs);
      const size_t at = c.kv.at(static_cast<uint32_t>(c.block_table[b]), by, start % bs);
      widen(c.k_cache + at, k, size_t{len} * d);
      widen(c.v_cache + at, v, size_t{len} * d);
      for (uint32_t r = 0; r < rows; ++r) {
        const uint32_t pos = c.past + first + r;
        if (pos < start) continue;  // causal: this piece lies wholly after the row
        const uint32_t n = min_u32(len, pos + 1 - start);
        for (uint32_t t = 0; t < n; ++t) scores[t] = dot(q + size_t{r} * d, k + size_t{t} * d, d) * c.scale;
        fold(state[r], acc + size_t{r} * d, scores, v, n, d);
      }
    }
    for (uint32_t r = 0; r < rows; ++r) {
      uint16_t* out = c.out + (size_t{first + r} * c.q_heads + head) * d;
      for (uint32_t i = 0; i < d; ++i) out[i] = f32_to_bf16(acc[size_t{r} * d + i] / state[r].sum);
    }
  }
}

}  // namespace metrale::cpu::baseline
