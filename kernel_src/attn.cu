// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `attn` (docs/kernels.md): attention over the paged bf16 KV cache, pools
// [num_blocks][kv_heads][block_size][head_dim]. Scores q.k summed in f32, times scale; softmax in
// f32; bf16 output. kv_append and the decode pair on CUDA cores: one block per work item of the
// contract's grid, threads over tokens for the scores and over head_dim for P.V (probabilities in
// f32), any 1-D block size up to 1024 (128 by convention). attn_prefill on tensor cores (sm_80),
// probabilities rounded to bf16 for P.V; any block of whole warps (below). head_dim 64, 128 or 256.
// Beside them output_gate, the gated attention's sigmoid gate on the attention output.
#include "tile_pipeline.cuh"

namespace {

constexpr unsigned kPartition = 512;   // attn_decode: context tokens per split
constexpr unsigned kPrefillRows = 64;  // attn_prefill: query rows per block
constexpr unsigned kMaxHeadDim = 256;

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

// Flash-style prefill on tensor cores. A block takes 64 query rows of one kv head; its work is
// the units (q head of the group, 16-row m-tile), one per warp at a time, in passes of as many
// units as the block has whole warps. A pass streams the cache positions its rows reach in chunks
// of 32 (16 at head_dim 256, so that the ring stays within 48 KiB) through a 2-stage cp.async ring (tile_pipeline.cuh; a chunk's rows are gathered through
// the block table, so any block_size works), every warp of the pass reading the same chunk.
// Per warp and chunk: S = Q Kᵀ (mma m16n8k16, bf16 → f32; Q in registers, each thread's four
// contiguous head_dim positions as fragment elements 2t, 2t+1, 2t+8, 2t+9 on Q and K alike),
// scores times scale in log2 units, causal mask, online softmax in registers (row maxima over
// the quad of lanes holding a row), P rounded to bf16 in the accumulator layout, which is the A
// fragment layout of P V, and O += P V with V's fragments loaded transposed (ldmatrix .trans).
// The row sums add the rounded P, so the output is the weighted mean of V with the weights the
// mma used; rounded to bf16 once at the end.
// K rows padded by 16 bf16 (the 8-byte fragment loads of a half-warp hit distinct banks), V rows
// by 8 (the eight rows of an ldmatrix matrix hit distinct banks); rows stay 16-byte aligned.
// kChunk cache positions per pipeline stage: 32, or 16 at head_dim 256 (17 KiB a stage either way).
template <unsigned D>
struct PrefillStage {
  static constexpr unsigned kChunk = D > 128 ? 16 : 32;
  static constexpr unsigned kKStride = D + 16, kVStride = D + 8;
  alignas(16) __nv_bfloat16 k[kChunk * kKStride];
  alignas(16) __nv_bfloat16 v[kChunk * kVStride];
};
constexpr unsigned kPrefillStages = 2;
constexpr size_t kPrefillStageBytes = sizeof(PrefillStage<128>) > sizeof(PrefillStage<256>) ? sizeof(PrefillStage<128>)
                                                                                              : sizeof(PrefillStage<256>);
// The ring for any head_dim (a kernel's static shared memory is the sum of its variables): 35 KiB.
struct alignas(16) PrefillShared {
  unsigned char bytes[kPrefillStages * kPrefillStageBytes];
};
static_assert(sizeof(PrefillShared) <= 40 * 1024, "attn_prefill's ring within sm_80's 48 KiB of static shared memory");

template <unsigned D>
struct PrefillPass {
  using Stage = PrefillStage<D>;
  static constexpr unsigned kChunk = Stage::kChunk;
  static constexpr unsigned kSteps = D / 16;      // k steps of S = Q Kᵀ
  static constexpr unsigned kSTiles = kChunk / 8;  // n-tiles of S (positions)
  // Up to head_dim 128 Q sits in registers and one sweep computes all of O; at 256 (so that the
  // registers, and the occupancy of the smaller heads, stay those of 128) Q's fragments are read
  // from global memory at each k step and O is computed in two sweeps of 128 columns.
  static constexpr bool kQInRegisters = D <= 128;
  static constexpr unsigned kODim = D <= 128 ? D : 128;  // columns of O per sweep
  static constexpr unsigned kSweeps = D / kODim;
  static constexpr unsigned kOTiles = kODim / 8;         // n-tiles of O per sweep

  // Shared by the block.
  const __nv_bfloat16* k_cache;
  const __nv_bfloat16* v_cache;
  const int* block_table;
  Stage* stages;
  unsigned kv_head, kv_heads, block_size, positions;  // positions 0 .. positions-1 are read
  float scale_log2;
  // This warp's unit: rows at positions pos0 (row g) and pos1 (row g + 8); last: the unit's
  // highest position; active: the warp has a unit in this pass.
  bool active;
  unsigned pos0, pos1, last;
  unsigned q[kQInRegisters ? kSteps : 1][4];
  const __nv_bfloat16 *q_lo, *q_hi;  // without kQInRegisters: rows g and g + 8 of Q (null past the rows)
  unsigned o_at;                     // this sweep's first column of O
  float o[kOTiles][4];
  float top[2], sum[2];  // running maximum (log2 units) and sum of rows g and g + 8

  template <bool ASYNC>
  __device__ __forceinline__ void load(unsigned s, unsigned c) {
    constexpr unsigned kPieces = D / 8;  // 16-byte pieces per row
    for (unsigned i = threadIdx.x; i < kChunk * kPieces; i += blockDim.x) {
      const unsigned r = i / kPieces, piece = i % kPieces;
      const unsigned pos = c * kChunk + r;
      const bool ok = pos < positions;
      const size_t at = ok ? kv_at(static_cast<unsigned>(block_table[pos / block_size]), kv_head, pos % block_size,
                                   kv_heads, block_size, D) + piece * 8
                           : 0;
      __nv_bfloat16* kd = stages[s].k + r * Stage::kKStride + piece * 8;
      __nv_bfloat16* vd = stages[s].v + r * Stage::kVStride + piece * 8;
      if constexpr (ASYNC) {
        metrale::cp_async16(kd, k_cache + at, ok);
        metrale::cp_async16(vd, v_cache + at, ok);
      } else {
        const uint4 zero = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(kd) = ok ? __ldg(reinterpret_cast<const uint4*>(k_cache + at)) : zero;
        *reinterpret_cast<uint4*>(vd) = ok ? __ldg(reinterpret_cast<const uint4*>(v_cache + at)) : zero;
      }
    }
  }

  __device__ __forceinline__ void compute(unsigned s, unsigned c) {
    const unsigned p0 = c * kChunk;
    if (!active || p0 > last) return;  // warp-uniform: nothing of this chunk reaches the unit's rows
    const Stage& st = stages[s];
    const unsigned lane = threadIdx.x & 31u, g = lane >> 2, t = lane & 3u;
    float sc[kSTiles][4];
#pragma unroll
    for (unsigned j = 0; j < kSTiles; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.f;
#pragma unroll
    for (unsigned kk = 0; kk < kSteps; ++kk) {
      unsigned qf[4];
      if constexpr (kQInRegisters) {
        qf[0] = q[kk][0], qf[1] = q[kk][1], qf[2] = q[kk][2], qf[3] = q[kk][3];
      } else {
        const uint2 lo = q_lo ? *reinterpret_cast<const uint2*>(q_lo + 16 * kk + 4 * t) : uint2{0, 0};
        const uint2 hi = q_hi ? *reinterpret_cast<const uint2*>(q_hi + 16 * kk + 4 * t) : uint2{0, 0};
        qf[0] = lo.x, qf[1] = hi.x, qf[2] = lo.y, qf[3] = hi.y;
      }
#pragma unroll
      for (unsigned j = 0; j < kSTiles; ++j) {
        const uint2 kv = *reinterpret_cast<const uint2*>(st.k + (8 * j + g) * Stage::kKStride + 16 * kk + 4 * t);
        const unsigned b[2] = {kv.x, kv.y};
        metrale::mma_bf16_16816(sc[j], qf, b);
      }
    }
    // Scores in log2 units, positions past a row masked; the maxima of rows g and g + 8.
    float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (unsigned j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (unsigned e = 0; e < 4; ++e) {
        const unsigned pos = p0 + 8 * j + 2 * t + (e & 1u);
        sc[j][e] = pos <= (e < 2 ? pos0 : pos1) ? sc[j][e] * scale_log2 : neg_inf();
        mx[e / 2] = fmaxf(mx[e / 2], sc[j][e]);
      }
    }
    float alpha[2];
#pragma unroll
    for (unsigned h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      // Position 0 is in every row's first chunk, so the new maximum is finite.
      const float next = fmaxf(top[h], mx[h]);
      alpha[h] = exp2f(top[h] - next);  // 0 on the first chunk (top = -inf)
      top[h] = next;
      sum[h] *= alpha[h];
    }
#pragma unroll
    for (unsigned j = 0; j < kOTiles; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }
    // P (bf16) in the A fragment layout of P V: for positions 16i.., S tiles 2i and 2i + 1.
    unsigned p[kSTiles][2];
#pragma unroll
    for (unsigned j = 0; j < kSTiles; ++j) {
      p[j][0] = metrale::bf16_pair(exp2f(sc[j][0] - top[0]), exp2f(sc[j][1] - top[0]));  // row g
      p[j][1] = metrale::bf16_pair(exp2f(sc[j][2] - top[1]), exp2f(sc[j][3] - top[1]));  // row g + 8
      sum[0] += metrale::bf16_lo(p[j][0]) + metrale::bf16_hi(p[j][0]);
      sum[1] += metrale::bf16_lo(p[j][1]) + metrale::bf16_hi(p[j][1]);
    }
#pragma unroll
    for (unsigned i = 0; i < kSTiles / 2; ++i) {
      const unsigned a[4] = {p[2 * i][0], p[2 * i][1], p[2 * i + 1][0], p[2 * i + 1][1]};
      // Lanes 0-15 address rows 16i .. 16i + 15 at column 8j, lanes 16-31 the same rows at 8j + 8:
      // the B fragments of O tiles j and j + 1.
      const __nv_bfloat16* row = st.v + (16 * i + (lane & 15u)) * Stage::kVStride + (lane & 16u) / 2;
#pragma unroll
      for (unsigned j = 0; j < kOTiles; j += 2) {
        unsigned b[4];
        metrale::ldmatrix_x4_trans(b, row + o_at + 8 * j);
        const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        metrale::mma_bf16_16816(o[j], a, b0);
        metrale::mma_bf16_16816(o[j + 1], a, b1);
      }
    }
  }
};

// This warp's unit: its positions, and Q (rows tile_row .. tile_row + 15 of head `head`; rows past
// the chunk's end are zeros, their outputs not stored).
template <unsigned D>
__device__ void start_unit(PrefillPass<D>& pass, const __nv_bfloat16* q, unsigned row0, unsigned rows, unsigned past,
                           unsigned q_heads, unsigned head, unsigned tile_row) {
  using Pass = PrefillPass<D>;
  const unsigned lane = threadIdx.x & 31u, g = lane >> 2, t = lane & 3u;
  pass.pos0 = past + row0 + tile_row + g;
  pass.pos1 = pass.pos0 + 8;
  pass.last = past + row0 + min(rows, tile_row + 16) - 1;
  const __nv_bfloat16* at[2];
#pragma unroll
  for (unsigned h = 0; h < 2; ++h) {
    const unsigned r = tile_row + g + 8 * h;
    at[h] = r < rows ? q + (static_cast<size_t>(row0 + r) * q_heads + head) * D : nullptr;
  }
  pass.q_lo = at[0];
  pass.q_hi = at[1];
  if constexpr (Pass::kQInRegisters) {
#pragma unroll
    for (unsigned kk = 0; kk < Pass::kSteps; ++kk) {
#pragma unroll
      for (unsigned h = 0; h < 2; ++h) {
        const uint2 v = at[h] ? *reinterpret_cast<const uint2*>(at[h] + 16 * kk + 4 * t) : uint2{0, 0};
        pass.q[kk][h] = v.x;      // row g (+8): positions 4t, 4t+1
        pass.q[kk][2 + h] = v.y;  // positions 4t+2, 4t+3
      }
    }
  }
}

// The sweep's columns of this warp's rows: O / the row sums, rounded to bf16 once.
template <unsigned D>
__device__ void store_unit(const PrefillPass<D>& pass, __nv_bfloat16* out, unsigned row0, unsigned rows,
                           unsigned q_heads, unsigned head, unsigned tile_row) {
  const unsigned lane = threadIdx.x & 31u, g = lane >> 2, t = lane & 3u;
#pragma unroll
  for (unsigned h = 0; h < 2; ++h) {
    float total = pass.sum[h];
    total += __shfl_xor_sync(0xffffffffu, total, 1);
    total += __shfl_xor_sync(0xffffffffu, total, 2);
    const unsigned r = tile_row + g + 8 * h;
    if (r >= rows) continue;
    __nv_bfloat16* dst = out + (static_cast<size_t>(row0 + r) * q_heads + head) * D + pass.o_at + 2 * t;
#pragma unroll
    for (unsigned j = 0; j < PrefillPass<D>::kOTiles; ++j) {
      *reinterpret_cast<unsigned*>(dst + 8 * j) = metrale::bf16_pair(pass.o[j][2 * h] / total, pass.o[j][2 * h + 1] / total);
    }
  }
}

template <unsigned D>
__device__ void attn_prefill_tc(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                                const int* block_table, __nv_bfloat16* out, unsigned m, unsigned past, unsigned q_heads,
                                unsigned kv_heads, unsigned block_size, float scale, unsigned char* shared) {
  using Pass = PrefillPass<D>;
  const unsigned warps = blockDim.x / 32, warp = threadIdx.x / 32;
  const unsigned kv_head = blockIdx.y, group = q_heads / kv_heads;
  const unsigned row0 = blockIdx.x * kPrefillRows;
  if (row0 >= m) return;  // uniform per block
  const unsigned rows = min(m - row0, kPrefillRows);
  const unsigned tiles = (rows + 15) / 16, units = group * tiles;
  Pass pass;
  pass.k_cache = k_cache;
  pass.v_cache = v_cache;
  pass.block_table = block_table;
  pass.stages = reinterpret_cast<typename Pass::Stage*>(shared);
  pass.kv_head = kv_head;
  pass.kv_heads = kv_heads;
  pass.block_size = block_size;
  pass.scale_log2 = scale * 1.44269504088896340736f;  // exp(x) = 2^(x log2(e))
  for (unsigned first = 0; first < units; first += warps) {
    // The pass reads the positions its highest row reaches.
    unsigned end = 0;
    for (unsigned u = first; u < min(units, first + warps); ++u) end = max(end, min(rows, (u % tiles) * 16 + 16));
    pass.positions = past + row0 + end;
    const unsigned unit = first + warp;
    pass.active = warp < warps && unit < units;
    const unsigned head = kv_head * group + unit / tiles, tile_row = (unit % tiles) * 16;
    if (pass.active) start_unit(pass, q, row0, rows, past, q_heads, head, tile_row);
    for (unsigned sweep = 0; sweep < Pass::kSweeps; ++sweep) {
      pass.o_at = sweep * Pass::kODim;
      if (pass.active) {
#pragma unroll
        for (unsigned j = 0; j < Pass::kOTiles; ++j) pass.o[j][0] = pass.o[j][1] = pass.o[j][2] = pass.o[j][3] = 0.f;
        pass.top[0] = pass.top[1] = neg_inf();
        pass.sum[0] = pass.sum[1] = 0.f;
      }
      metrale::run_pipeline<kPrefillStages>((pass.positions + Pass::kChunk - 1) / Pass::kChunk, pass);
      if (pass.active) store_unit(pass, out, row0, rows, q_heads, head, tile_row);
    }
  }
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

// Grid (ceil(m/64), kv_heads), block: whole warps (32 .. 1024 threads, 128 by convention; threads
// past the last whole warp only load, and fewer than 32 threads trap, as does a head_dim other
// than 64, 128 or 256).
extern "C" __global__ void attn_prefill(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                        const __nv_bfloat16* v_cache, const int* block_table, __nv_bfloat16* out,
                                        unsigned m, unsigned past, unsigned q_heads, unsigned kv_heads,
                                        unsigned head_dim, unsigned block_size, unsigned num_blocks, float scale) {
  (void)num_blocks;
  __shared__ PrefillShared stages;
  if (blockDim.x < 32 || blockDim.y != 1 || blockDim.z != 1) __trap();
  if (head_dim == 128) {
    attn_prefill_tc<128>(q, k_cache, v_cache, block_table, out, m, past, q_heads, kv_heads, block_size, scale, stages.bytes);
  } else if (head_dim == 256) {
    attn_prefill_tc<256>(q, k_cache, v_cache, block_table, out, m, past, q_heads, kv_heads, block_size, scale, stages.bytes);
  } else if (head_dim == 64) {
    attn_prefill_tc<64>(q, k_cache, v_cache, block_table, out, m, past, q_heads, kv_heads, block_size, scale, stages.bytes);
  } else {
    __trap();
  }
}

// The output gate of Qwen3.5's and Qwen3-Next's attention: out[r][j] = bf16(x · bf16(σ(gate))), σ in
// f32 rounded to bf16 (transformers' bf16 sigmoid), the product in f32 rounded once. Grid (m, 1),
// any 1-D block; out may be x (each thread writes only what it read).
extern "C" __global__ void output_gate(const __nv_bfloat16* x, const __nv_bfloat16* gate, __nv_bfloat16* out, unsigned m,
                                       unsigned n) {
  if (blockIdx.x >= m) return;
  const size_t row = static_cast<size_t>(blockIdx.x) * n;
  for (unsigned j = threadIdx.x; j < n; j += blockDim.x) {
    const float g = metrale::to_f32(metrale::to_bf16(metrale::sigmoid(metrale::to_f32(gate[row + j]))));
    out[row + j] = metrale::to_bf16(metrale::to_f32(x[row + j]) * g);
  }
}
