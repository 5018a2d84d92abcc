// SPDX-License-Identifier: MIT OR Apache-2.0
// attn_prefill on the AVX512_BF16 tier (included by simd_avx512bf16.cpp only, so internal
// linkage as kernels.hpp says; its attn_decode is attn_avx512.hpp's). The baseline's contract and
// rounding, with q.k and p.v as `vdpbf16ps` (exact bf16 products summed in f32) and the
// probabilities rounded to bf16 before they meet V, as docs/kernels.md allows.
//
// Flash style over tiles of 16 query rows x 32 positions, the cache walked 16 positions at a time
// as AttnAvx512::PagedRows hands them out. Lanes are query rows: q is transposed into bf16 pairs
// once per launch block and q head, each K pair is a broadcast, and the online softmax is lane-wise
// (no horizontal reductions). P.V takes two positions per instruction: V rows t and t + 1
// interleaved (vpunpck[lh]wd, once per tile for the block's 64 rows) against each row's broadcast
// probability pair.
// Note: vdpbf16ps treats subnormal bf16 inputs as zero (DAZ), as bf16_isa.hpp says.
#pragma once

#include "act_avx512.hpp"
#include "attn_avx512.hpp"
#include "attn_calls.hpp"
#include "numeric.hpp"

#include <immintrin.h>

#include <cstring>

namespace metrale::cpu {
namespace {

struct AttnAvx512Bf16 {
  using PagedRows = AttnAvx512::PagedRows;
  static constexpr uint32_t kChunk = AttnAvx512::kChunk;  // positions per K or V step
  static constexpr uint32_t kTile = 32;                   // positions per online-softmax step
  static constexpr uint32_t kRowGroup = 16;               // query rows per lane vector

  static __m512bh bh(__m512i v) { return AttnAvx512::bh(v); }
  static __m512bh pair_at(const void* p) {
    int32_t bits;
    std::memcpy(&bits, p, 4);
    return bh(_mm512_set1_epi32(bits));
  }

  // P.V accumulators hold dimensions interleaved as vpunpck[lh]wd leave them (AttnAvx512::pair_dims_first).
  static __m512 dims_first(__m512 lo, __m512 hi) { return AttnAvx512::pair_dims_first(lo, hi); }
  static __m512 dims_second(__m512 lo, __m512 hi) { return AttnAvx512::pair_dims_second(lo, hi); }

  // vpermw indices: probabilities of positions 2t (words 0-15) and 2t + 1 (words 16-31) of 16
  // rows into one bf16 pair per row.
  alignas(64) static constexpr uint16_t kPairWords[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                          8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

  // Scores of one row group (lanes) against the 16 positions of one chunk: s[t] for t < 16,
  // scaled, positions after a row's own masked to -inf when `causal`; returns their maximum.
  template <uint32_t D>
  static __m512 prefill_scores(const uint32_t* qt, const uint16_t* k, uint32_t t0, __m512i pos, bool causal,
                               float scale, float* s) {
    constexpr uint32_t P = D / 2;
    __m512 acc[16];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (uint32_t pc = 0; pc < P; pc += 8) {
      __m512bh qr[8];
      for (uint32_t i = 0; i < 8; ++i) qr[i] = bh(_mm512_load_si512(qt + size_t{pc + i} * 16));
#pragma GCC unroll 16
      for (uint32_t t = 0; t < 16; ++t)
#pragma GCC unroll 8
        for (uint32_t i = 0; i < 8; ++i) acc[t] = _mm512_dpbf16_ps(acc[t], qr[i], pair_at(k + size_t{t} * D + 2 * (pc + i)));
    }
    const __m512 scaled = _mm512_set1_ps(scale), masked = _mm512_set1_ps(-__builtin_inff());
    __m512 top = masked;
    for (uint32_t t = 0; t < 16; ++t) {
      __m512 v = _mm512_mul_ps(acc[t], scaled);
      if (causal)
        v = _mm512_mask_mov_ps(masked, _mm512_cmpge_epu32_mask(pos, _mm512_set1_epi32(static_cast<int>(t0 + t))), v);
      _mm512_store_ps(s + 16 * t, v);
      top = _mm512_max_ps(top, v);
    }
    return top;
  }

  // o[16 rows][D] (interleaved dims) = o * alpha(row) + P.V over `pairs` position pairs.
  template <uint32_t D>
  static void prefill_values(float* o, const float* alpha, const uint32_t* pp, const uint32_t* vt, uint32_t pairs) {
    constexpr uint32_t V = D / 16;
    for (uint32_t rb = 0; rb < kRowGroup; rb += 4) {
      for (uint32_t cb = 0; cb < V; cb += 4) {
        __m512 acc[4][4];
        for (uint32_t i = 0; i < 4; ++i) {
          const __m512 a = _mm512_set1_ps(alpha[rb + i]);
          for (uint32_t j = 0; j < 4; ++j) acc[i][j] = _mm512_mul_ps(_mm512_load_ps(o + size_t{rb + i} * D + 16 * (cb + j)), a);
        }
        for (uint32_t tp = 0; tp < pairs; ++tp) {
          __m512bh w[4];
          for (uint32_t i = 0; i < 4; ++i) w[i] = pair_at(pp + tp * 16 + rb + i);
          for (uint32_t j = 0; j < 4; ++j) {
            const __m512bh v = bh(_mm512_load_si512(vt + (size_t{tp} * V + cb + j) * 16));
            for (uint32_t i = 0; i < 4; ++i) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], v, w[i]);
          }
        }
        for (uint32_t i = 0; i < 4; ++i)
          for (uint32_t j = 0; j < 4; ++j) _mm512_store_ps(o + size_t{rb + i} * D + 16 * (cb + j), acc[i][j]);
      }
    }
  }

  // The block's query rows of q head `head` as bf16 pairs, column-major per group of 16 rows
  // (rows past the chunk zero).
  template <uint32_t D>
  static void load_query_pairs(const PrefillCall& c, uint32_t head, uint32_t first, uint32_t rows, uint32_t* qt) {
    constexpr uint32_t P = D / 2, kGroups = kAttnPrefillRows / kRowGroup;
    for (uint32_t r = 0; r < kGroups * kRowGroup; ++r) {
      uint32_t* column = qt + size_t{r / kRowGroup} * P * 16 + r % kRowGroup;
      if (r < rows) {
        const uint16_t* row = c.q + (size_t{first + r} * c.q_heads + head) * D;
        for (uint32_t i = 0; i < P; ++i) std::memcpy(column + size_t{i} * 16, row + 2 * i, 4);
      } else {
        for (uint32_t i = 0; i < P; ++i) column[size_t{i} * 16] = 0;
      }
    }
  }

  // The tile's V rows interleaved by position pairs, the operand layout of vdpbf16ps.
  template <uint32_t D>
  static void pair_values(const uint16_t* const* vc, uint32_t pairs, uint32_t* vt) {
    constexpr uint32_t V = D / 16, R = D / 32;
    for (uint32_t tp = 0; tp < pairs; ++tp) {
      const uint16_t* even = vc[tp / 8] + size_t{2 * (tp % 8)} * D;
      for (uint32_t r = 0; r < R; ++r) {
        const __m512i x = AttnAvx512::load(even + 32 * r), y = AttnAvx512::load(even + D + 32 * r);
        _mm512_store_si512(vt + (size_t{tp} * V + 2 * r) * 16, _mm512_unpacklo_epi16(x, y));
        _mm512_store_si512(vt + (size_t{tp} * V + 2 * r + 1) * 16, _mm512_unpackhi_epi16(x, y));
      }
    }
  }

  // Each row's accumulators over its sum, rounded once to bf16 into the output.
  template <uint32_t D>
  static void store_rows(const PrefillCall& c, const float* o, const float* sum, uint32_t head, uint32_t first,
                         uint32_t rows) {
    constexpr uint32_t R = D / 32;
    for (uint32_t r = 0; r < rows; ++r) {
      const float* acc = o + size_t{r} * D;
      uint16_t* out = c.out + (size_t{first + r} * c.q_heads + head) * D;
      const __m512 total = _mm512_set1_ps(sum[r]);
      for (uint32_t k = 0; k < R; ++k) {
        const __m512 lo = _mm512_load_ps(acc + 32 * k), hi = _mm512_load_ps(acc + 32 * k + 16);
        ActAvx512::store_bf16(out + 32 * k, _mm512_div_ps(dims_first(lo, hi), total), 0xffff);
        ActAvx512::store_bf16(out + 32 * k + 16, _mm512_div_ps(dims_second(lo, hi), total), 0xffff);
      }
    }
  }

  template <uint32_t D>
  static void prefill(const PrefillCall& c, uint32_t bx, uint32_t by, unsigned char* scratch) {
    constexpr uint32_t P = D / 2, V = D / 16;
    constexpr uint32_t kRows = kAttnPrefillRows, kGroups = kRows / kRowGroup;
    const uint32_t first = bx * kRows, rows = min_u32(c.m - first, kRows);
    const uint32_t groups = (rows + kRowGroup - 1) / kRowGroup;
    const uint32_t group = c.q_heads / c.kv.kv_heads;
    const uint32_t last = c.past + first + rows - 1, end = last + 1;  // the block's last position
    // Scratch: q pairs u32 [4 groups][P][16 rows], o f32 [64][D], V pairs u32 [16][V][16],
    // scores f32 [32][16], probability pairs u32 [16][16], max, sum f32 [64], alpha f32 [16],
    // staged K and V chunks u16 [2][16][D] each.
    auto* qt = scratch_at<uint32_t>(scratch, 0);
    auto* o = reinterpret_cast<float*>(qt + size_t{kGroups} * P * 16);
    auto* vt = reinterpret_cast<uint32_t*>(o + size_t{kRows} * D);
    auto* s = reinterpret_cast<float*>(vt + size_t{kTile / 2} * V * 16);
    auto* pp = reinterpret_cast<uint32_t*>(s + kTile * 16);
    auto* top = reinterpret_cast<float*>(pp + kTile / 2 * 16);
    float* sum = top + kRows;
    float* alpha = sum + kRows;
    auto* kstage = reinterpret_cast<uint16_t*>(alpha + 16);
    uint16_t* vstage = kstage + 2 * kChunk * D;
    const PagedRows keys{c.k_cache, c.block_table, c.kv, by}, values{c.v_cache, c.block_table, c.kv, by};
    const __m512i pair_words = _mm512_load_si512(kPairWords);

    for (uint32_t g = 0; g < group; ++g) {
      const uint32_t head = by * group + g;
      load_query_pairs<D>(c, head, first, rows, qt);
      for (size_t i = 0; i < size_t{kRows} * D; i += 16) _mm512_store_ps(o + i, _mm512_setzero_ps());
      for (uint32_t r = 0; r < kRows; ++r) top[r] = -__builtin_inff(), sum[r] = 0.0f;

      for (uint32_t t0 = 0; t0 < end; t0 += kTile) {
        const uint32_t chunks = t0 + kChunk < end ? 2 : 1;
        const uint16_t* kc[2];
        const uint16_t* vc[2];
        for (uint32_t j = 0; j < chunks; ++j) {
          kc[j] = keys.chunk(t0 + j * kChunk, end, kstage + j * kChunk * D, D);
          vc[j] = values.chunk(t0 + j * kChunk, end, vstage + j * kChunk * D, D);
        }
        const uint32_t pairs = chunks * kChunk / 2;
        pair_values<D>(vc, pairs, vt);
        for (uint32_t rg = 0; rg < groups; ++rg) {
          const uint32_t low = c.past + first + rg * kRowGroup, high = min_u32(low + kRowGroup - 1, last);
          if (t0 > high) continue;  // the whole tile lies after every row of the group
          const __m512i pos = _mm512_min_epu32(
              _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(low)),
                               _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
              _mm512_set1_epi32(static_cast<int>(last)));
          const bool causal = t0 + chunks * kChunk - 1 > low;
          const uint32_t* q_pairs = qt + size_t{rg} * P * 16;
          __m512 tile_max = prefill_scores<D>(q_pairs, kc[0], t0, pos, causal, c.scale, s);
          if (chunks == 2)
            tile_max = _mm512_max_ps(tile_max, prefill_scores<D>(q_pairs, kc[1], t0 + kChunk, pos, causal, c.scale,
                                                                 s + kChunk * 16));
          const __m512 old_max = _mm512_loadu_ps(top + rg * kRowGroup);
          const __m512 new_max = _mm512_max_ps(old_max, tile_max);
          const __m512 scale_old = AttnAvx512::exp0(_mm512_sub_ps(old_max, new_max));
          __m512 row_sum = _mm512_mul_ps(_mm512_loadu_ps(sum + rg * kRowGroup), scale_old);
          for (uint32_t tp = 0; tp < pairs; ++tp) {
            const __m512 even = AttnAvx512::exp0(_mm512_sub_ps(_mm512_load_ps(s + 32 * tp), new_max));
            const __m512 odd = AttnAvx512::exp0(_mm512_sub_ps(_mm512_load_ps(s + 32 * tp + 16), new_max));
            row_sum = _mm512_add_ps(row_sum, _mm512_add_ps(even, odd));
            const __m512i words = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(odd, even));
            _mm512_store_si512(pp + tp * 16, _mm512_permutexvar_epi16(pair_words, words));
          }
          _mm512_storeu_ps(top + rg * kRowGroup, new_max);
          _mm512_storeu_ps(sum + rg * kRowGroup, row_sum);
          _mm512_store_ps(alpha, scale_old);
          prefill_values<D>(o + size_t{rg} * kRowGroup * D, alpha, pp, vt, pairs);
        }
      }
      store_rows<D>(c, o, sum, head, first, rows);
    }
  }

  static void attn_prefill(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const PrefillCall c = prefill_call(args);
    AttnWalk::with_head_dim(c.kv.head_dim, [&](auto d) { prefill<decltype(d)::value>(c, bx, by, scratch); });
  }

  static void set(SimdBodies& b) {
    AttnAvx512::set(b);
    b[Simd::attn_prefill] = &attn_prefill;
  }
};

}  // namespace
}  // namespace metrale::cpu
