// SPDX-License-Identifier: MIT OR Apache-2.0
// attn_decode and attn_prefill on the AVX2 tier (AVX2 + FMA; included by simd_avx2.cpp only, so
// internal linkage as kernels.hpp says). The baseline's contract, record layout and rounding:
// scores are f32 sums of the exact bf16 products (f32 FMAs), the softmax's exp is exp0 below, the
// probabilities stay f32 against V, one rounding to bf16 at the output.
//
// The decode walks the cache as the AVX-512 tiers' (attn_walk.hpp): each K and V row read once
// for the whole GQA group, 16 positions (a chunk) at a time, several kv heads of a split per
// block, the pieces ahead prefetched beside each line read. A 16-element piece of a row is one
// 32-byte load widened in registers as its 8 even then its 8 odd elements (a shift and an and, no
// shuffles), q once per block in the same order. Scores: 2 positions x up to 4 q heads per step
// leave 8-lane partial sums, summed by one transposing tree (sum8) per head and 8 positions. P.V:
// up to 4 q heads' f32 accumulators per pass over the chunk's V rows.
//
// The prefill is flash style over tiles of 32 positions (two chunks) for the block's 64 query
// rows: lanes are query rows (8 per vector), so the online softmax is lane-wise. The tile's K and
// V rows are widened to f32 once and shared by the 8 row groups; q is transposed once per block
// and q head. q.k: 2 row groups x 4 positions per step, each K element a broadcast; P.V: 2 row
// groups x 4 dimensions per step, each V element a broadcast against the groups' probabilities;
// the output accumulates transposed ([dim][row]) and is turned back at the end.
#pragma once

#include "act_avx2.hpp"
#include "attn_calls.hpp"
#include "attn_walk.hpp"
#include "numeric.hpp"

#include <immintrin.h>

#include <cstring>

namespace metrale::cpu {
namespace {

struct AttnAvx2 : AttnWalk, Avx2Lanes {
  static constexpr uint32_t kAhead = 4;  // decode: chunks prefetched ahead
  static constexpr uint32_t kLanes = 8;
  using Query = float;  // q widened, split as split_rows leaves it

  static __m256i load(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static __m256 even_of(__m256i x) { return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)); }
  static __m256 odd_of(__m256i x) {
    return _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }

  // e^x for x <= 88 from ActAvx2::exp_reduced (2^n e^r, the degree-6 Taylor polynomial), 2^n
  // built in the exponent field; 0 below -87 (the smallest normal 2^n), at -inf and at NaN (the
  // masked scores, the running maximum before the first position and -inf - -inf).
  static __m256 exp0(__m256 x) {
    const __m256 kept = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
    __m256 n;
    const __m256 p = ActAvx2::exp_reduced(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), n);
    const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(two_n)), kept);
  }

  static __m256 lanes_below(uint32_t valid) {
    return _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  }

  // One vector of the lane sums of 8 accumulators, lane j the sum of a[j].
  static __m256 sum8(const float* a) {
    const auto at = [a](uint32_t j) { return _mm256_load_ps(a + kLanes * j); };
    const __m256 low = _mm256_hadd_ps(_mm256_hadd_ps(at(0), at(1)), _mm256_hadd_ps(at(2), at(3)));
    const __m256 high = _mm256_hadd_ps(_mm256_hadd_ps(at(4), at(5)), _mm256_hadd_ps(at(6), at(7)));
    return _mm256_add_ps(_mm256_permute2f128_ps(low, high, 0x20), _mm256_permute2f128_ps(low, high, 0x31));
  }

  // ---- attn_decode ----

  // `rows` rows of D bf16 as f32, each 16-element piece as its 8 even elements then its 8 odd ones.
  template <uint32_t D>
  static void split_rows(const uint16_t* in, float* out, uint32_t rows) {
    for (size_t i = 0; i < size_t{rows} * D; i += 16) {
      const __m256i x = load(in + i);
      _mm256_storeu_ps(out + i, even_of(x));
      _mm256_storeu_ps(out + i + 8, odd_of(x));
    }
  }

  // The partial dot products of HB q heads ([HB][D] split) with the 16 rows of one chunk (bf16):
  // partial[h][t] is an 8-lane vector whose lane sum is q_h.k_t. kRows positions x HB heads a
  // step (8 accumulators), one line of the chunk at `ahead` prefetched beside each piece read.
  template <uint32_t D, uint32_t HB>
  static void chunk_partials(const float* q, const uint16_t* k, float* partial, const char* ahead) {
    constexpr uint32_t P = D / 16, kRows = HB == 1 ? 4 : 2;
    for (uint32_t tb = 0; tb < kChunk; tb += kRows) {
      __m256 acc[kRows][HB];
      for (auto& row : acc)
        for (auto& a : row) a = _mm256_setzero_ps();
#pragma GCC unroll 16
      for (uint32_t p = 0; p < P; ++p) {
        prefetch_part<D>(ahead, tb / kRows * P + p, kChunk / kRows * P);
        __m256 even[kRows], odd[kRows];
#pragma GCC unroll 4
        for (uint32_t i = 0; i < kRows; ++i) {
          const __m256i x = load(k + size_t{tb + i} * D + 16 * p);
          even[i] = even_of(x);
          odd[i] = odd_of(x);
        }
#pragma GCC unroll 4
        for (uint32_t h = 0; h < HB; ++h) {
          __m256 qe = _mm256_loadu_ps(q + size_t{h} * D + 16 * p), qo = _mm256_loadu_ps(q + size_t{h} * D + 16 * p + 8);
          __asm__("" : "+x"(qe), "+x"(qo));  // one load each: GCC would fold one into every multiply-add
#pragma GCC unroll 4
          for (uint32_t i = 0; i < kRows; ++i) acc[i][h] = _mm256_fmadd_ps(qo, odd[i], _mm256_fmadd_ps(qe, even[i], acc[i][h]));
        }
      }
#pragma GCC unroll 4
      for (uint32_t i = 0; i < kRows; ++i)
#pragma GCC unroll 4
        for (uint32_t h = 0; h < HB; ++h) _mm256_store_ps(partial + (size_t{h} * kChunk + tb + i) * kLanes, acc[i][h]);
    }
  }

  // out[0..16) = scale * the lane sums of head h's 16 partial vectors (chunk_partials' layout).
  static void chunk_scores(const float* partial, uint32_t h, float scale, float* out) {
    for (uint32_t half = 0; half < kChunk; half += kLanes)
      _mm256_storeu_ps(out + half, _mm256_mul_ps(sum8(partial + (size_t{h} * kChunk + half) * kLanes), _mm256_set1_ps(scale)));
  }

  // acc[HB][D] (split) += probabilities [HB][t] (rows kAttnPartition apart) x the chunk's V rows
  // t < count; the pieces in passes of PB so that HB x PB pairs of accumulators stay in
  // registers, the chunk at `ahead` prefetched during the first pass.
  template <uint32_t D, uint32_t HB>
  static void chunk_values(float* acc, const float* probs, const uint16_t* v, uint32_t count, const char* ahead) {
    constexpr uint32_t P = D / 16, PB = HB >= 3 ? 1 : 4 / HB;
    for (uint32_t p0 = 0; p0 < P; p0 += PB) {
      __m256 a[HB][2 * PB];
#pragma GCC unroll 4
      for (uint32_t h = 0; h < HB; ++h)
#pragma GCC unroll 8
        for (uint32_t j = 0; j < 2 * PB; ++j) a[h][j] = _mm256_loadu_ps(acc + size_t{h} * D + 16 * p0 + 8 * j);
      for (uint32_t t = 0; t < count; ++t) {
        if (p0 == 0) prefetch_part<D>(ahead, t, kChunk);
        __m256 w[HB];
#pragma GCC unroll 4
        for (uint32_t h = 0; h < HB; ++h) w[h] = _mm256_broadcast_ss(probs + size_t{h} * kAttnPartition + t);
#pragma GCC unroll 4
        for (uint32_t p = 0; p < PB; ++p) {
          const __m256i x = load(v + size_t{t} * D + 16 * (p0 + p));
          const __m256 even = even_of(x), odd = odd_of(x);
#pragma GCC unroll 4
          for (uint32_t h = 0; h < HB; ++h) {
            a[h][2 * p] = _mm256_fmadd_ps(w[h], even, a[h][2 * p]);
            a[h][2 * p + 1] = _mm256_fmadd_ps(w[h], odd, a[h][2 * p + 1]);
          }
        }
      }
#pragma GCC unroll 4
      for (uint32_t h = 0; h < HB; ++h)
#pragma GCC unroll 8
        for (uint32_t j = 0; j < 2 * PB; ++j) _mm256_storeu_ps(acc + size_t{h} * D + 16 * p0 + 8 * j, a[h][j]);
    }
  }

  // Each score row of `s` [rows][512] (n used) to exp(score - its maximum), the maximum and the
  // sum into the row's record.
  static void softmax_rows(float* s, uint32_t rows, uint32_t n, float* const* records) {
    for (uint32_t r = 0; r < rows; ++r, s += kAttnPartition) {
      __m256 top = _mm256_set1_ps(-__builtin_inff());
      for (uint32_t t = 0; t < n; t += kLanes)
        top = _mm256_max_ps(top, _mm256_blendv_ps(top, _mm256_loadu_ps(s + t), lanes_below(n - t)));
      const float max = hmax(top);
      __m256 sum = _mm256_setzero_ps();
      for (uint32_t t = 0; t < n; t += kLanes) {
        const __m256 e = _mm256_and_ps(exp0(_mm256_sub_ps(_mm256_loadu_ps(s + t), _mm256_set1_ps(max))), lanes_below(n - t));
        sum = _mm256_add_ps(sum, e);
        _mm256_storeu_ps(s + t, e);
      }
      records[r][0] = max;
      records[r][1] = hsum(sum);
    }
  }

  template <uint32_t D>
  static void decode(const DecodeCall& c, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const std::optional<DecodeWork> work = block_work(c, bx, by);
    if (work) slices<D>(*work, [&](const DecodeWork& w) { decode_walk<D>(w, scratch); });
  }

  template <uint32_t D>
  static void decode_walk(const DecodeWork& w, unsigned char* scratch) {
    const uint32_t rows = w.query_heads(), n = w.n;
    const DecodeScratch<D, kLanes> sc(scratch, rows);
    w.record_addresses(sc.records);
    split_rows<D>(w.query_rows(), sc.q, rows);
    key_scores<AttnAvx2, D>(w, sc.q, sc.scores, sc.partial, sc.stage);
    softmax_rows(sc.scores, rows, n, sc.records);
    std::memset(sc.acc, 0, size_t{rows} * D * sizeof(float));
    value_sums<AttnAvx2, D>(w, sc.scores, sc.acc, sc.stage);
    for (uint32_t r = 0; r < rows; ++r) {
      const float* a = sc.acc + size_t{r} * D;
      for (uint32_t j = 0; j < D; j += 16) {  // (even, odd) back into dimension order
        const __m256 even = _mm256_loadu_ps(a + j), odd = _mm256_loadu_ps(a + j + 8);
        const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
        _mm256_storeu_ps(sc.records[r] + 2 + j, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(sc.records[r] + 2 + j + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
      }
    }
  }

  static void attn_decode(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const DecodeCall c = decode_call(args);
    with_head_dim(c.kv.head_dim, [&](auto d) { decode<decltype(d)::value>(c, bx, by, scratch); });
  }

  // ---- attn_prefill ----

  static constexpr uint32_t kTile = 2 * kChunk;                     // positions per online-softmax step

  // The block's scratch for one q head: q and the output transposed ([group][dim][8 rows]), the
  // tile's K and V rows as f32 ([32][D]), its probabilities ([2 groups][32 positions][8 rows]), each
  // row's running maximum and sum, and the staged K and V chunks.
  template <uint32_t D>
  struct PrefillScratch {
    float* qt;
    float* ot;
    float* k;
    float* v;
    float* p;
    float* top;
    float* sum;
    uint16_t* kstage;
    uint16_t* vstage;
    explicit PrefillScratch(unsigned char* scratch)
        : qt(scratch_at<float>(scratch, 0)), ot(qt + size_t{kAttnPrefillRows} * D), k(ot + size_t{kAttnPrefillRows} * D),
          v(k + kTile * D), p(v + kTile * D), top(p + 2 * kTile * kLanes), sum(top + kAttnPrefillRows),
          kstage(reinterpret_cast<uint16_t*>(sum + kAttnPrefillRows)), vstage(kstage + kChunk * D) {}
  };

  // 16 rows of D bf16 as f32, in order.
  template <uint32_t D>
  static void widen_chunk(const uint16_t* in, float* out) {
    for (uint32_t i = 0; i < kChunk * D; i += 8) _mm256_store_ps(out + i, load_bf16(in + i));
  }

  // Scores of row groups g0, g0 + 1 (lanes) against the tile's 32 positions: s[g][t] scaled;
  // 4 positions x 2 groups a step, each K element (f32) a broadcast.
  template <uint32_t D>
  static void tile_scores(const float* qt, const float* k, float scale, float* s) {
    for (uint32_t tb = 0; tb < kTile; tb += 4) {
      __m256 acc[2][4];
      for (auto& row : acc)
        for (auto& a : row) a = _mm256_setzero_ps();
#pragma GCC unroll 4
      for (uint32_t d = 0; d < D; ++d) {
        __m256 a0 = _mm256_load_ps(qt + size_t{d} * kLanes), a1 = _mm256_load_ps(qt + size_t{D + d} * kLanes);
        __asm__("" : "+x"(a0), "+x"(a1));  // one load each (GCC would fold one into every multiply-add)
#pragma GCC unroll 4
        for (uint32_t t = 0; t < 4; ++t) {
          const __m256 kv = _mm256_broadcast_ss(k + size_t{tb + t} * D + d);
          acc[0][t] = _mm256_fmadd_ps(a0, kv, acc[0][t]);
          acc[1][t] = _mm256_fmadd_ps(a1, kv, acc[1][t]);
        }
      }
      const __m256 scaled = _mm256_set1_ps(scale);
#pragma GCC unroll 2
      for (uint32_t g = 0; g < 2; ++g)
#pragma GCC unroll 4
        for (uint32_t t = 0; t < 4; ++t)
          _mm256_store_ps(s + (size_t{g} * kTile + tb + t) * kLanes, _mm256_mul_ps(acc[g][t], scaled));
    }
  }

  // ot of row groups g0, g0 + 1 ([dim][8]) = ot * alpha(row) + P.V over the tile's `count`
  // positions; 4 dims x 2 groups a step, each V element (f32) a broadcast.
  template <uint32_t D>
  static void tile_values(float* ot, const float* alpha, const float* p, const float* v, uint32_t count) {
    const __m256 al0 = _mm256_loadu_ps(alpha), al1 = _mm256_loadu_ps(alpha + kLanes);
    for (uint32_t db = 0; db < D; db += 4) {
      __m256 acc[2][4];
#pragma GCC unroll 4
      for (uint32_t j = 0; j < 4; ++j) {
        acc[0][j] = _mm256_mul_ps(_mm256_load_ps(ot + size_t{db + j} * kLanes), al0);
        acc[1][j] = _mm256_mul_ps(_mm256_load_ps(ot + size_t{D + db + j} * kLanes), al1);
      }
      for (uint32_t t = 0; t < count; ++t) {
        __m256 p0 = _mm256_load_ps(p + size_t{t} * kLanes), p1 = _mm256_load_ps(p + size_t{kTile + t} * kLanes);
        __asm__("" : "+x"(p0), "+x"(p1));  // as in tile_scores
#pragma GCC unroll 4
        for (uint32_t j = 0; j < 4; ++j) {
          const __m256 x = _mm256_broadcast_ss(v + size_t{t} * D + db + j);
          acc[0][j] = _mm256_fmadd_ps(p0, x, acc[0][j]);
          acc[1][j] = _mm256_fmadd_ps(p1, x, acc[1][j]);
        }
      }
#pragma GCC unroll 4
      for (uint32_t j = 0; j < 4; ++j) {
        _mm256_store_ps(ot + size_t{db + j} * kLanes, acc[0][j]);
        _mm256_store_ps(ot + size_t{D + db + j} * kLanes, acc[1][j]);
      }
    }
  }

  // The online softmax of one row group over the tile's scores s [32][8] (in place into
  // probabilities), positions after a row's own masked when `causal` (pos: each lane's
  // position); returns the factor its earlier accumulators take.
  static __m256 tile_softmax(float* s, float* top, float* sum, __m256i pos, uint32_t t0, bool causal) {
    __m256 tile_max = _mm256_set1_ps(-__builtin_inff());
    for (uint32_t t = 0; t < kTile; ++t) {
      __m256 x = _mm256_load_ps(s + t * kLanes);
      if (causal) {
        const __m256i after = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(t0 + t)), pos);
        x = _mm256_blendv_ps(x, _mm256_set1_ps(-__builtin_inff()), _mm256_castsi256_ps(after));
        _mm256_store_ps(s + t * kLanes, x);
      }
      tile_max = _mm256_max_ps(tile_max, x);
    }
    const __m256 old_max = _mm256_loadu_ps(top), new_max = _mm256_max_ps(old_max, tile_max);
    const __m256 alpha = exp0(_mm256_sub_ps(old_max, new_max));
    __m256 row_sum = _mm256_mul_ps(_mm256_loadu_ps(sum), alpha);
    for (uint32_t t = 0; t < kTile; ++t) {
      const __m256 e = exp0(_mm256_sub_ps(_mm256_load_ps(s + t * kLanes), new_max));
      row_sum = _mm256_add_ps(row_sum, e);
      _mm256_store_ps(s + t * kLanes, e);
    }
    _mm256_storeu_ps(top, new_max);
    _mm256_storeu_ps(sum, row_sum);
    return alpha;
  }

  template <uint32_t D>
  static void prefill(const PrefillCall& c, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const uint32_t first = bx * kAttnPrefillRows, rows = min_u32(c.m - first, kAttnPrefillRows);
    const uint32_t groups = (rows + kLanes - 1) / kLanes, pairs = (groups + 1) / 2;
    const uint32_t group = c.q_heads / c.kv.kv_heads;
    const uint32_t last = c.past + first + rows - 1, end = last + 1;  // the block's last position
    const PrefillScratch<D> sc(scratch);
    const PagedRows keys{c.k_cache, c.block_table, c.kv, by}, values{c.v_cache, c.block_table, c.kv, by};
    alignas(32) float alpha[2 * kLanes];
    for (uint32_t g = 0; g < group; ++g) {
      const uint32_t head = by * group + g;
      for (uint32_t r = 0; r < 2 * pairs * kLanes; ++r)  // rows past the chunk: zero queries
        for (uint32_t d = 0; d < D; ++d)
          sc.qt[(size_t{r / kLanes} * D + d) * kLanes + r % kLanes] =
              r < rows ? bf16_to_f32(c.q[(size_t{first + r} * c.q_heads + head) * D + d]) : 0.0f;
      std::memset(sc.ot, 0, sizeof(float) * kAttnPrefillRows * D);
      for (uint32_t r = 0; r < kAttnPrefillRows; ++r) sc.top[r] = -__builtin_inff(), sc.sum[r] = 0.0f;
      for (uint32_t t0 = 0; t0 < end; t0 += kTile) {
        const uint32_t count = min_u32(kTile, end - t0);
        for (uint32_t j = 0; j * kChunk < count; ++j) {  // a second chunk past the end: masked, never read
          widen_chunk<D>(keys.chunk(t0 + j * kChunk, end, sc.kstage, D), sc.k + j * kChunk * D);
          widen_chunk<D>(values.chunk(t0 + j * kChunk, end, sc.vstage, D), sc.v + j * kChunk * D);
        }
        for (uint32_t gp = 0; gp < pairs; ++gp) {
          const uint32_t low = c.past + first + 2 * gp * kLanes;
          if (t0 > min_u32(low + 2 * kLanes - 1, last)) continue;  // the tile lies after every row of the pair
          const uint32_t g0 = 2 * gp;
          tile_scores<D>(sc.qt + size_t{g0} * D * kLanes, sc.k, c.scale, sc.p);
          const bool causal = t0 + kTile - 1 > low;
          for (uint32_t j = 0; j < 2; ++j) {
            const __m256i pos = _mm256_min_epu32(
                _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(low + j * kLanes)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                _mm256_set1_epi32(static_cast<int>(last)));
            const uint32_t at = (g0 + j) * kLanes;
            _mm256_store_ps(alpha + j * kLanes, tile_softmax(sc.p + j * kTile * kLanes, sc.top + at, sc.sum + at, pos, t0, causal));
          }
          tile_values<D>(sc.ot + size_t{g0} * D * kLanes, alpha, sc.p, sc.v, count);
        }
      }
      for (uint32_t r = 0; r < rows; ++r) {
        uint16_t* out = c.out + (size_t{first + r} * c.q_heads + head) * D;
        const float* column = sc.ot + size_t{r / kLanes} * D * kLanes + r % kLanes;
        for (uint32_t d = 0; d < D; ++d) out[d] = f32_to_bf16(column[size_t{d} * kLanes] / sc.sum[r]);
      }
    }
  }

  static void attn_prefill(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const PrefillCall c = prefill_call(args);
    with_head_dim(c.kv.head_dim, [&](auto d) { prefill<decltype(d)::value>(c, bx, by, scratch); });
  }

  static void set(SimdBodies& b) {
    b[Simd::attn_decode] = &attn_decode;
    b[Simd::attn_prefill] = &attn_prefill;
  }
};

}  // namespace
}  // namespace metrale::cpu
