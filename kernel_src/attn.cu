// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `attn` (docs/kernels.md): attention over the paged bf16 KV cache, pools
// [num_blocks][kv_heads][block_size][head_dim]. Scores q.k summed in f32, times scale; softmax in
// f32; probabilities in f32 against V; bf16 output. The plain first form: one block per work
// item of the contract's grid, threads over tokens for the scores and over head_dim for P.V.
// Any 1-D block size up to 1024 (128 by convention).
#include "metrale_common.cuh"

namespace {

constexpr unsigned kPartition = 512;   // attn_decode: context tokens per split
constexpr unsigned kPrefillRows = 64;  // attn_prefill: query rows per block
constexpr unsigned kMaxHeadDim = 128;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

struct Max {
  __device__ float operator()(float a, float b) const { return a > b ? a : b; }
};
struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};

__device__ __forceinline__ size_t kv_at(unsigned block, unsigned head, unsigned offset, unsigned kv_heads,
                                        unsigned block_size, unsigned head_dim) {
  return ((static_cast<size_t>(block) * kv_heads + head) * block_size + offset) * head_dim;
}

}  // namespace

// Grid (tokens, 1): token blockIdx.x's rows into slot slot_mapping[blockIdx.x]. A slot outside
// the pools is skipped: the device cannot fail the launch, and never writes out of bounds.
extern "C" __global__ void kv_append(const __nv_bfloat16* k, const __nv_bfloat16* v, const int* slot_mapping,
                                     __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, unsigned tokens,
                                     unsigned kv_heads, unsigned head_dim, unsigned block_size, unsigned num_blocks) {
  const unsigned t = blockIdx.x;
  if (t >= tokens) return;
  const int slot = slot_mapping[t];
  if (slot < 0 || static_cast<unsigned long long>(slot) >= static_cast<unsigned long long>(num_blocks) * block_size) return;
  const unsigned block = static_cast<unsigned>(slot) / block_size, offset = static_cast<unsigned>(slot) % block_size;
  const unsigned row = kv_heads * head_dim;
  for (unsigned i = threadIdx.x; i < row; i += blockDim.x) {
    const unsigned head = i / head_dim, d = i % head_dim;
    const size_t to = kv_at(block, head, offset, kv_heads, block_size, head_dim) + d;
    k_cache[to] = k[static_cast<size_t>(t) * row + i];
    v_cache[to] = v[static_cast<size_t>(t) * row + i];
  }
}

// Grid (partitions, seqs*kv_heads): split blockIdx.x of sequence blockIdx.y / kv_heads, for the
// q heads of kv head blockIdx.y % kv_heads, one after another; writes their records
// (max, sum, head_dim accumulators) into partials [seqs][q_heads][partitions][head_dim + 2].
extern "C" __global__ void attn_decode(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                       const __nv_bfloat16* v_cache, const int* block_tables,
                                       const int* context_lens, float* partials, unsigned seqs, unsigned q_heads,
                                       unsigned kv_heads, unsigned head_dim, unsigned block_size, unsigned max_blocks,
                                       unsigned num_blocks, float scale) {
  (void)num_blocks;
  __shared__ float scores[kPartition];
  __shared__ float qs[kMaxHeadDim];
  __shared__ float scratch[1024];
  const unsigned seq = blockIdx.y / kv_heads, kv_head = blockIdx.y % kv_heads;
  if (seq >= seqs) return;
  const unsigned context = static_cast<unsigned>(context_lens[seq]);
  const unsigned begin = blockIdx.x * kPartition;
  if (begin >= context) return;
  const unsigned n = min(context - begin, kPartition);
  const unsigned group = q_heads / kv_heads;
  const unsigned partitions = (max_blocks * block_size + kPartition - 1) / kPartition;
  const int* table = block_tables + static_cast<size_t>(seq) * max_blocks;
  for (unsigned g = 0; g < group; ++g) {
    const unsigned head = kv_head * group + g;
    for (unsigned i = threadIdx.x; i < head_dim; i += blockDim.x)
      qs[i] = metrale::to_f32(q[(static_cast<size_t>(seq) * q_heads + head) * head_dim + i]);
    __syncthreads();
    float top = neg_inf();
    for (unsigned t = threadIdx.x; t < n; t += blockDim.x) {
      const unsigned pos = begin + t;
      const __nv_bfloat16* key =
          k_cache + kv_at(static_cast<unsigned>(table[pos / block_size]), kv_head, pos % block_size, kv_heads, block_size, head_dim);
      float dot = 0.f;
      for (unsigned i = 0; i < head_dim; ++i) dot += qs[i] * metrale::to_f32(key[i]);
      scores[t] = dot * scale;
      top = fmaxf(top, scores[t]);
    }
    top = metrale::block_reduce(top, scratch, Max{});
    float sum = 0.f;
    for (unsigned t = threadIdx.x; t < n; t += blockDim.x) {
      scores[t] = expf(scores[t] - top);
      sum += scores[t];
    }
    sum = metrale::block_reduce(sum, scratch, Sum{});  // its barriers also publish scores[]
    float* record = partials + ((static_cast<size_t>(seq) * q_heads + head) * partitions + blockIdx.x) * (head_dim + 2);
    if (threadIdx.x == 0) {
      record[0] = top;
      record[1] = sum;
    }
    for (unsigned i = threadIdx.x; i < head_dim; i += blockDim.x) {
      float acc = 0.f;
      for (unsigned t = 0; t < n; ++t) {
        const unsigned pos = begin + t;
        acc += scores[t] * metrale::to_f32(v_cache[kv_at(static_cast<unsigned>(table[pos / block_size]), kv_head,
                                                         pos % block_size, kv_heads, block_size, head_dim) + i]);
      }
      record[2 + i] = acc;
    }
    // No barrier before the next head: every thread has left this loop before it passes the
    // barrier after the next head's qs[], and only then is scores[] rewritten.
  }
}

// Grid (q_heads, seqs): the records of the splits sequence blockIdx.y's context reaches, merged.
extern "C" __global__ void attn_decode_combine(const float* partials, const int* context_lens, __nv_bfloat16* out,
                                               unsigned seqs, unsigned q_heads, unsigned head_dim,
                                               unsigned partitions) {
  const unsigned head = blockIdx.x, seq = blockIdx.y;
  if (seq >= seqs || head >= q_heads) return;
  const unsigned splits = (static_cast<unsigned>(context_lens[seq]) + kPartition - 1) / kPartition;
  const size_t stride = head_dim + 2;
  const float* records = partials + (static_cast<size_t>(seq) * q_heads + head) * partitions * stride;
  float top = neg_inf();
  for (unsigned p = 0; p < splits; ++p) top = fmaxf(top, records[p * stride]);
  float sum = 0.f;
  for (unsigned p = 0; p < splits; ++p) sum += records[p * stride + 1] * expf(records[p * stride] - top);
  for (unsigned i = threadIdx.x; i < head_dim; i += blockDim.x) {
    float value = 0.f;
    for (unsigned p = 0; p < splits; ++p) value += records[p * stride + 2 + i] * expf(records[p * stride] - top);
    out[(static_cast<size_t>(seq) * q_heads + head) * head_dim + i] = metrale::to_bf16(value / sum);
  }
}

// Grid (ceil(m/64), kv_heads): one thread per query row of the block's 64 (threads past them
// idle), for the q heads of kv head blockIdx.y in turn; online softmax over positions 0..past+i.
extern "C" __global__ void attn_prefill(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                        const __nv_bfloat16* v_cache, const int* block_table, __nv_bfloat16* out,
                                        unsigned m, unsigned past, unsigned q_heads, unsigned kv_heads,
                                        unsigned head_dim, unsigned block_size, unsigned num_blocks, float scale) {
  (void)num_blocks;
  const unsigned kv_head = blockIdx.y;
  const unsigned group = q_heads / kv_heads;
  for (unsigned r = threadIdx.x; r < kPrefillRows; r += blockDim.x) {
    const unsigned row = blockIdx.x * kPrefillRows + r;
    if (row >= m) break;
    const unsigned pos = past + row;
    for (unsigned g = 0; g < group; ++g) {
      const unsigned head = kv_head * group + g;
      float qr[kMaxHeadDim], acc[kMaxHeadDim];
      const __nv_bfloat16* qrow = q + (static_cast<size_t>(row) * q_heads + head) * head_dim;
      for (unsigned i = 0; i < head_dim; ++i) {
        qr[i] = metrale::to_f32(qrow[i]);
        acc[i] = 0.f;
      }
      float top = neg_inf(), sum = 0.f;
      for (unsigned j = 0; j <= pos; ++j) {
        const size_t at =
            kv_at(static_cast<unsigned>(block_table[j / block_size]), kv_head, j % block_size, kv_heads, block_size, head_dim);
        float dot = 0.f;
        for (unsigned i = 0; i < head_dim; ++i) dot += qr[i] * metrale::to_f32(k_cache[at + i]);
        const float s = dot * scale;
        if (s > top) {
          const float alpha = top == neg_inf() ? 0.f : expf(top - s);
          sum *= alpha;
          for (unsigned i = 0; i < head_dim; ++i) acc[i] *= alpha;
          top = s;
        }
        const float p = expf(s - top);
        sum += p;
        for (unsigned i = 0; i < head_dim; ++i) acc[i] += p * metrale::to_f32(v_cache[at + i]);
      }
      __nv_bfloat16* dst = out + (static_cast<size_t>(row) * q_heads + head) * head_dim;
      for (unsigned i = 0; i < head_dim; ++i) dst[i] = metrale::to_bf16(acc[i] / sum);
    }
  }
}
