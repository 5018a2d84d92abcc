// SPDX-License-Identifier: MIT OR Apache-2.0
// attn_decode on the AVX-512 tiers (included by simd_avx512.cpp and simd_avx512bf16.cpp, so
// internal linkage as kernels.hpp says): the baseline's contract and record layout, each K and
// V row widened once per token into head_dim/16 registers for the whole GQA group; scores are
// f32 sums of the exact products (lanes summed in a tree), the softmax's exp is
// ActAvx512::exp, P.V in f32 for two q heads at a time.
#pragma once

#include "act_avx512.hpp"
#include "attn_calls.hpp"
#include "numeric.hpp"

#include <immintrin.h>

namespace metrale::cpu {
namespace {

struct AttnAvx512 {
  static __m512 widen16(const uint16_t* p) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  static __mmask16 tail(uint32_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }

  template <uint32_t D>
  static void decode(const DecodeCall& c, uint32_t bx, uint32_t by, unsigned char* scratch) {
    constexpr uint32_t R = D / 16;  // registers per row
    const uint32_t seq = by / c.kv.kv_heads, kv_head = by % c.kv.kv_heads;
    const auto context = static_cast<uint32_t>(c.context_lens[seq]);
    const uint32_t begin = bx * kAttnPartition;
    if (begin >= context) return;
    const uint32_t n = min_u32(context - begin, kAttnPartition);
    const uint32_t group = c.q_heads / c.kv.kv_heads, bs = c.kv.block_size, first_head = kv_head * group;
    // Scratch: q [group][D] f32, scores [group][512].
    float* q = scratch_at<float>(scratch, 0);
    float* scores = q + size_t{group} * D;
    const uint16_t* q_in = c.q + (size_t{seq} * c.q_heads + first_head) * D;
    for (size_t i = 0; i < size_t{group} * D; ++i) q[i] = bf16_to_f32(q_in[i]);
    const int32_t* table = c.block_tables + size_t{seq} * c.max_blocks;
    const auto row_of = [&](const uint16_t* pool, uint32_t pos) {
      return pool + c.kv.at(static_cast<uint32_t>(table[pos / bs]), kv_head, pos % bs);
    };
    for (uint32_t t = 0; t < n; ++t) {
      const uint16_t* key = row_of(c.k_cache, begin + t);
      __m512 k[R];
      for (uint32_t r = 0; r < R; ++r) k[r] = widen16(key + 16 * r);
      for (uint32_t g = 0; g < group; ++g) {
        const float* qg = q + size_t{g} * D;
        __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(qg), k[0]);
        for (uint32_t r = 1; r < R; ++r) acc = _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16 * r), k[r], acc);
        scores[g * kAttnPartition + t] = _mm512_reduce_add_ps(acc) * c.scale;
      }
    }
    for (uint32_t g = 0; g < group; ++g) {
      float* s = scores + g * kAttnPartition;
      __m512 top = _mm512_set1_ps(-__builtin_inff());
      for (uint32_t t = 0; t < n; t += 16) top = _mm512_mask_max_ps(top, tail(n - t), top, _mm512_maskz_loadu_ps(tail(n - t), s + t));
      const float max = _mm512_reduce_max_ps(top);
      __m512 sum = _mm512_setzero_ps();
      for (uint32_t t = 0; t < n; t += 16) {
        const __mmask16 m = tail(n - t);
        const __m512 e = ActAvx512::exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + t), _mm512_set1_ps(max)));
        _mm512_mask_storeu_ps(s + t, m, e);
        sum = _mm512_mask_add_ps(sum, m, sum, e);
      }
      float* record = c.partials + ((size_t{seq} * c.q_heads + first_head + g) * c.partitions() + bx) * partial_stride(D);
      record[0] = max;
      record[1] = _mm512_reduce_add_ps(sum);
    }
    // P.V, two heads per pass over the split's V rows (the second pass reads them from cache).
    for (uint32_t g = 0; g < group; g += 2) {
      const bool pair = g + 1 < group;
      __m512 a0[R], a1[R];
      for (uint32_t r = 0; r < R; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
      const float* p0 = scores + g * kAttnPartition;
      const float* p1 = pair ? p0 + kAttnPartition : p0;
      for (uint32_t t = 0; t < n; ++t) {
        const uint16_t* value = row_of(c.v_cache, begin + t);
        const __m512 w0 = _mm512_set1_ps(p0[t]), w1 = _mm512_set1_ps(p1[t]);
        for (uint32_t r = 0; r < R; ++r) {
          const __m512 v = widen16(value + 16 * r);
          a0[r] = _mm512_fmadd_ps(w0, v, a0[r]);
          a1[r] = _mm512_fmadd_ps(w1, v, a1[r]);
        }
      }
      float* record = c.partials + ((size_t{seq} * c.q_heads + first_head + g) * c.partitions() + bx) * partial_stride(D);
      for (uint32_t r = 0; r < R; ++r) _mm512_storeu_ps(record + 2 + 16 * r, a0[r]);
      if (pair) {
        record += c.partitions() * partial_stride(D);  // the next q head's record of this split
        for (uint32_t r = 0; r < R; ++r) _mm512_storeu_ps(record + 2 + 16 * r, a1[r]);
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
