// SPDX-License-Identifier: MIT OR Apache-2.0
// attn_decode on the AVX-512 tiers (included by simd_avx512.cpp and simd_avx512bf16.cpp, so
// internal linkage as kernels.hpp says), and the cache walk attn_avx512bf16.hpp's prefill shares.
// The baseline's contract, record layout and rounding: scores are f32 sums of the exact bf16
// products, the softmax's exp is ActAvx512::exp, P.V in f32.
//
// The decode reads each K and V row once for the whole GQA group, 16 positions (a "chunk") at a
// time: one cache block of a kv head holds them contiguously when block_size >= 16 (splits start
// on multiples of 16), otherwise, and at the end of a context, they are copied first
// (PagedRows::chunk). Rows are widened to f32 in registers, each 32-element piece as its even
// then its odd elements (a shift and a mask, no shuffles), q once per split in the same order, so
// q.k pairs element with element. Scores: 4 positions x up to 4 q heads per step (each K element
// widened once, each load feeding several FMAs) leave 16-lane partial sums, which one transposing
// tree per head and chunk (sum16) turns into a vector of 16 scores. P.V: up to 4 q heads' f32
// accumulators per pass over the chunk's V rows, kept in scratch between chunks. The chunks after
// the current one are prefetched, the split's K and then its V: the decode's cost is reading the
// cache once.
// f32 FMAs, not vdpbf16ps, on the BF16 tier too: on Intel's Sapphire and Emerald Rapids a
// vdpbf16ps zmm issues about every other cycle, so its 32 multiply-adds come at half the rate of
// two 16-lane FMAs per cycle.
#pragma once

#include "act_avx512.hpp"
#include "attn_calls.hpp"
#include "numeric.hpp"

#include <immintrin.h>

#include <cstring>
#include <type_traits>

namespace metrale::cpu {
namespace {

struct AttnAvx512 {
  static constexpr uint32_t kChunk = 16;  // positions per step: one score vector
  static constexpr uint32_t kAhead = 4;   // decode: chunks prefetched ahead

  static __m512i load(const void* p) { return _mm512_loadu_si512(p); }

  // exp that takes -inf (a masked score, or the running maximum before the first position) and
  // the NaN of -inf - -inf to 0: ActAvx512::exp is NaN at -inf.
  static __m512 exp0(__m512 x) { return ActAvx512::exp(_mm512_max_ps(x, _mm512_set1_ps(-1e4f))); }

  // The rows of one kv head of one sequence in a paged pool.
  struct PagedRows {
    const uint16_t* pool;
    const int32_t* table;
    KvShape kv;
    uint32_t head;
    const uint16_t* row(uint32_t pos) const {
      return pool + kv.at(static_cast<uint32_t>(table[pos / kv.block_size]), head, pos % kv.block_size);
    }
    // Positions [t0, t0 + 16), rows of `d` elements: in place when one cache block holds them
    // and all lie below `end`; otherwise copied to `stage` ([16][d]), rows from `end` on zero.
    const uint16_t* chunk(uint32_t t0, uint32_t end, uint16_t* stage, uint32_t d) const {
      if (kv.block_size >= kChunk && t0 + kChunk <= end) return row(t0);
      for (uint32_t i = 0; i < kChunk; ++i) {
        if (t0 + i < end)
          std::memcpy(stage + size_t{i} * d, row(t0 + i), size_t{d} * 2);
        else
          std::memset(stage + size_t{i} * d, 0, size_t{d} * 2);
      }
      return stage;
    }
    // The chunk of positions [t0, t0 + 16) where one cache block holds it contiguously (16 rows
    // of `d`; the part below `end`), else null: the address the decode prefetches.
    const char* chunk_address(uint32_t t0, uint32_t end) const {
      return kv.block_size >= kChunk && t0 < end ? reinterpret_cast<const char*>(row(t0)) : nullptr;
    }
  };

  // Part `part` of `parts` of a chunk (16 rows of D bf16) into L2 (locality 1: the L1's few fill
  // buffers would cap the lines in flight), spread over the loop that reads the current chunk
  // rather than in one burst. Always inlined: GCC 12 finds a function whose only effect is
  // prefetching "pure" and drops the calls to it.
  template <uint32_t D>
  [[gnu::always_inline]] static void prefetch_part(const char* chunk, uint32_t part, uint32_t parts) {
    if (chunk == nullptr) return;
    constexpr uint32_t kBytes = kChunk * D * 2;
    for (uint32_t at = part * kBytes / parts; at < (part + 1) * kBytes / parts; at += 64) __builtin_prefetch(chunk + at, 0, 1);
  }

  // sum16's lane order: accumulator i must hold position kSumOrder[i] of the chunk for lane j of
  // the result to be position j (the order is its own inverse).
  static constexpr uint32_t kSumOrder[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

  // One vector of the lane sums of 16 accumulators, lane j the sum of a[kSumOrder[j]]: four
  // halving steps, each adding two vectors' halves side by side.
  static __m512 sum16(const __m512 (&a)[16]) {
    __m512 s1[8], s2[4], s3[2];
    for (int j = 0; j < 8; ++j)  // lanes 0-7: a[j]'s sums of halves, 8-15: a[j + 8]'s
      s1[j] = _mm512_add_ps(_mm512_mask_blend_ps(0xff00, a[j], a[j + 8]),
                            _mm512_shuffle_f32x4(a[j], a[j + 8], _MM_SHUFFLE(1, 0, 3, 2)));
    for (int j = 0; j < 4; ++j)  // one 128-bit lane per accumulator
      s2[j] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[j], s1[j + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_f32x4(s1[j], s1[j + 4], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int j = 0; j < 2; ++j)  // two lanes per accumulator
      s3[j] = _mm512_add_ps(_mm512_shuffle_ps(s2[j], s2[j + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_ps(s2[j], s2[j + 2], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(3, 1, 3, 1)));
  }

  // `rows` rows of D bf16 as f32, each 32-element piece as its 16 even elements (the low halves
  // of its pairs) then its 16 odd ones.
  template <uint32_t D>
  static void split_rows(const uint16_t* in, float* out, uint32_t rows) {
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (size_t i = 0; i < size_t{rows} * D; i += 32) {
      const __m512i x = load(in + i);
      _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)));
      _mm512_storeu_ps(out + i + 16, _mm512_castsi512_ps(_mm512_and_si512(x, high)));
    }
  }

  // Split accumulators (even dims, odd dims of one 32-dim piece) back into dimension order.
  static __m512 dims_first(__m512 even, __m512 odd) {
    return _mm512_permutex2var_ps(even, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), odd);
  }
  static __m512 dims_second(__m512 even, __m512 odd) {
    return _mm512_permutex2var_ps(even, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31),
                                  odd);
  }

  // The partial dot products of HB q heads (q split, [HB][D] f32) with the 16 rows of one chunk
  // (bf16, [16][D]): partial[h][t] is a 16-lane vector whose lane sum is q_h.k_t. Four positions
  // x HB heads at a time, so each K element is widened once and each register load feeds
  // several FMAs.
  template <uint32_t D, uint32_t HB>
  static void chunk_partials(const float* q, const uint16_t* k, float* partial, const char* ahead) {
    constexpr uint32_t P = D / 32;  // 32-element pieces per row
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (uint32_t tb = 0; tb < kChunk; tb += 4) {
      prefetch_part<D>(ahead, tb / 4, kChunk / 4);
      __m512 acc[4][HB];
      for (auto& row : acc)
        for (auto& a : row) a = _mm512_setzero_ps();
      for (uint32_t p = 0; p < P; ++p) {
        __m512 even[4], odd[4];
        for (uint32_t i = 0; i < 4; ++i) {
          const __m512i x = load(k + size_t{tb + i} * D + 32 * p);
          even[i] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
          odd[i] = _mm512_castsi512_ps(_mm512_and_si512(x, high));
        }
        for (uint32_t h = 0; h < HB; ++h) {
          const __m512 qe = _mm512_loadu_ps(q + size_t{h} * D + 32 * p), qo = _mm512_loadu_ps(q + size_t{h} * D + 32 * p + 16);
          for (uint32_t i = 0; i < 4; ++i) acc[i][h] = _mm512_fmadd_ps(qo, odd[i], _mm512_fmadd_ps(qe, even[i], acc[i][h]));
        }
      }
      for (uint32_t i = 0; i < 4; ++i)
        for (uint32_t h = 0; h < HB; ++h) _mm512_store_ps(partial + (size_t{h} * kChunk + tb + i) * 16, acc[i][h]);
    }
  }

  // acc[HB][D] (split) += probabilities [HB][t] (rows kAttnPartition apart) x the chunk's V
  // rows t < count (bf16), widened once per pass; the pieces in passes of PB so that HB x PB
  // pairs of accumulators stay in registers.
  template <uint32_t D, uint32_t HB>
  static void chunk_values(float* acc, const float* probs, const uint16_t* v, uint32_t count, const char* ahead) {
    constexpr uint32_t P = D / 32, PB = P < 8 / HB ? P : 8 / HB;
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (uint32_t p0 = 0; p0 < P; p0 += PB) {
      __m512 a[HB][2 * PB];
      for (uint32_t h = 0; h < HB; ++h)
        for (uint32_t j = 0; j < 2 * PB; ++j) a[h][j] = _mm512_loadu_ps(acc + size_t{h} * D + 32 * p0 + 16 * j);
      for (uint32_t t = 0; t < count; ++t) {
        if (p0 == 0) prefetch_part<D>(ahead, t, kChunk);
        __m512 w[HB];
        for (uint32_t h = 0; h < HB; ++h) w[h] = _mm512_set1_ps(probs[size_t{h} * kAttnPartition + t]);
        for (uint32_t p = 0; p < PB; ++p) {
          const __m512i x = load(v + size_t{t} * D + 32 * (p0 + p));
          const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
          const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(x, high));
          for (uint32_t h = 0; h < HB; ++h) {
            a[h][2 * p] = _mm512_fmadd_ps(w[h], even, a[h][2 * p]);
            a[h][2 * p + 1] = _mm512_fmadd_ps(w[h], odd, a[h][2 * p + 1]);
          }
        }
      }
      for (uint32_t h = 0; h < HB; ++h)
        for (uint32_t j = 0; j < 2 * PB; ++j) _mm512_storeu_ps(acc + size_t{h} * D + 32 * p0 + 16 * j, a[h][j]);
    }
  }

  // f(std::integral_constant<uint32_t, HB>) for the HB = min(4, heads) of one block of heads.
  template <class F>
  static void with_heads(uint32_t heads, const F& f) {
    switch (heads >= 4 ? 4 : heads) {
      case 4: f(std::integral_constant<uint32_t, 4>{}); break;
      case 3: f(std::integral_constant<uint32_t, 3>{}); break;
      case 2: f(std::integral_constant<uint32_t, 2>{}); break;
      default: f(std::integral_constant<uint32_t, 1>{}); break;
    }
  }

  template <uint32_t D>
  static void decode(const DecodeCall& c, uint32_t bx, uint32_t by, unsigned char* scratch) {
    constexpr uint32_t V = D / 16;  // f32 vectors per row
    const uint32_t seq = by / c.kv.kv_heads, kv_head = by % c.kv.kv_heads;
    const auto context = static_cast<uint32_t>(c.context_lens[seq]);
    const uint32_t begin = bx * kAttnPartition;
    if (begin >= context) return;
    const uint32_t n = min_u32(context - begin, kAttnPartition), end = begin + n;
    const uint32_t chunks = (n + kChunk - 1) / kChunk;
    const uint32_t group = c.q_heads / c.kv.kv_heads, first_head = kv_head * group;
    // Scratch: q f32 [group][D] (split), scores then probabilities f32 [group][512], P.V
    // accumulators f32 [group][D] (split), partial dot products f32 [4][16][16], a staged
    // chunk [16][D].
    float* q = scratch_at<float>(scratch, 0);
    float* scores = q + size_t{group} * D;
    float* acc = scores + size_t{group} * kAttnPartition;
    float* partial = acc + size_t{group} * D;
    auto* stage = reinterpret_cast<uint16_t*>(partial + 4 * kChunk * 16);
    const int32_t* table = c.block_tables + size_t{seq} * c.max_blocks;
    const PagedRows keys{c.k_cache, table, c.kv, kv_head}, values{c.v_cache, table, c.kv, kv_head};
    split_rows<D>(c.q + (size_t{seq} * c.q_heads + first_head) * D, q, group);
    const __m512 scale = _mm512_set1_ps(c.scale);

    for (uint32_t ch = 0; ch < kAhead && ch < chunks; ++ch)  // the first chunks at once
      prefetch_part<D>(keys.chunk_address(begin + ch * kChunk, end), 0, 1);
    for (uint32_t ch = 0; ch < chunks; ++ch) {
      // The stream read ahead: this split's K chunks, then its V chunks.
      const uint32_t ahead = ch + kAhead;
      const char* next = ahead < chunks ? keys.chunk_address(begin + ahead * kChunk, end)
                                        : values.chunk_address(begin + (ahead - chunks) * kChunk, end);
      const uint16_t* k = keys.chunk(begin + ch * kChunk, end, stage, D);
      for (uint32_t g = 0; g < group; g += 4) {
        const uint32_t heads = min_u32(4, group - g);
        with_heads(heads, [&](auto hb) {
          chunk_partials<D, decltype(hb)::value>(q + size_t{g} * D, k, partial, g == 0 ? next : nullptr);
        });
        for (uint32_t h = 0; h < heads; ++h) {
          __m512 sums[16];
          for (uint32_t i = 0; i < 16; ++i) sums[i] = _mm512_load_ps(partial + (size_t{h} * kChunk + kSumOrder[i]) * 16);
          _mm512_storeu_ps(scores + size_t{g + h} * kAttnPartition + ch * kChunk, _mm512_mul_ps(sum16(sums), scale));
        }
      }
    }
    const auto tail = [](uint32_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); };
    for (uint32_t g = 0; g < group; ++g) {
      float* s = scores + size_t{g} * kAttnPartition;
      __m512 top = _mm512_set1_ps(-__builtin_inff());
      for (uint32_t t = 0; t < n; t += 16) top = _mm512_mask_max_ps(top, tail(n - t), top, _mm512_loadu_ps(s + t));
      const float max = _mm512_reduce_max_ps(top);
      __m512 sum = _mm512_setzero_ps();
      for (uint32_t t = 0; t < n; t += 16) {
        const __m512 e = _mm512_maskz_mov_ps(tail(n - t), exp0(_mm512_sub_ps(_mm512_loadu_ps(s + t), _mm512_set1_ps(max))));
        sum = _mm512_add_ps(sum, e);
        _mm512_storeu_ps(s + t, e);
      }
      float* record = c.partials + ((size_t{seq} * c.q_heads + first_head + g) * c.partitions() + bx) * partial_stride(D);
      record[0] = max;
      record[1] = _mm512_reduce_add_ps(sum);
      for (uint32_t j = 0; j < V; ++j) _mm512_storeu_ps(acc + size_t{g} * D + 16 * j, _mm512_setzero_ps());
    }
    for (uint32_t ch = 0; ch < chunks; ++ch) {
      const char* next = values.chunk_address(begin + (ch + kAhead) * kChunk, end);
      const uint16_t* v = values.chunk(begin + ch * kChunk, end, stage, D);
      const uint32_t count = min_u32(kChunk, n - ch * kChunk);
      for (uint32_t g = 0; g < group; g += 4) {
        const float* p = scores + size_t{g} * kAttnPartition + ch * kChunk;
        with_heads(group - g, [&](auto hb) {
          chunk_values<D, decltype(hb)::value>(acc + size_t{g} * D, p, v, count, g == 0 ? next : nullptr);
        });
      }
    }
    for (uint32_t g = 0; g < group; ++g) {
      float* record = c.partials + ((size_t{seq} * c.q_heads + first_head + g) * c.partitions() + bx) * partial_stride(D);
      const float* a = acc + size_t{g} * D;
      for (uint32_t j = 0; j < V; j += 2) {
        const __m512 even = _mm512_loadu_ps(a + 16 * j), odd = _mm512_loadu_ps(a + 16 * j + 16);
        _mm512_storeu_ps(record + 2 + 16 * j, dims_first(even, odd));
        _mm512_storeu_ps(record + 2 + 16 * j + 16, dims_second(even, odd));
      }
    }
  }

  static void attn_decode(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const DecodeCall c = decode_call(args);
    if (c.kv.head_dim == 64)
      decode<64>(c, bx, by, scratch);
    else
      decode<128>(c, bx, by, scratch);
  }

  static void set(SimdBodies& b) { b[Simd::attn_decode] = &attn_decode; }
};

}  // namespace
}  // namespace metrale::cpu
