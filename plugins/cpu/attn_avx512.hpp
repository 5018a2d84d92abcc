// SPDX-License-Identifier: MIT OR Apache-2.0
// attn_decode on the AVX-512 tiers (included by simd_avx512.cpp and simd_avx512bf16.cpp, so
// internal linkage as kernels.hpp says); the cache walk is attn_walk.hpp's.
// The baseline's contract, record layout and rounding: scores are f32 sums of the exact bf16
// products, the softmax's exp is ActAvx512::exp, P.V in f32 (probabilities rounded to bf16 on the BF16 tier).
//
// The decode reads each K and V row once for the whole GQA group, 16 positions (a "chunk") at a
// time, and one block walks several kv heads of its split (DecodeWork): a cache block holds its
// heads side by side, so the walk is one sequential read. One cache block of a kv head holds a
// chunk contiguously when block_size >= 16 (splits start on multiples of 16), otherwise, and at
// the end of a context, it is copied first (PagedRows::chunk). Scores: 4 positions x up to 4 q
// heads per step (each load feeding several multiply-adds) leave 16-lane partial sums, which one
// transposing tree per head and chunk (sum16) turns into a vector of 16 scores. P.V: up to 4 q
// heads' f32 accumulators per pass over the chunk's V rows, kept in scratch between chunks. The
// pieces after the current one are prefetched, one line beside each line read, the K walk's and
// then the V walk's: the decode's cost is reading the cache once.
// The multiply-adds: on the AVX-512 tier f32 FMAs on rows widened in registers (each 32-element
// piece as its even then its odd elements: a shift and a mask, no shuffles; q once per block in
// the same order). On the AVX512_BF16 tier (compiled with __AVX512BF16__) vdpbf16ps, as that
// tier's attn_prefill: q.k from the bf16 inputs directly, and P.V with the probabilities rounded
// to bf16 against V rows interleaved by position pairs, half the instructions of the FMAs
// (AMD EPYC, Zen 5: the f32 version computes at about 1.2x the read bandwidth of one core, too
// little to hide the memory behind). The inner loops over pieces, heads and positions carry
// `#pragma GCC unroll`: GCC 12 otherwise keeps the accumulator arrays on the stack, a load and
// a store around every multiply-add (the BF16 decode from the cache ran at 22 GB/s instead of 37).
#pragma once

#include "act_avx512.hpp"
#include "attn_calls.hpp"
#include "attn_walk.hpp"
#include "numeric.hpp"

#include <immintrin.h>

#include <cstring>
#include <type_traits>

namespace metrale::cpu {
namespace {

struct AttnAvx512 : AttnWalk {
  static constexpr uint32_t kAhead = 4;   // decode: chunks prefetched ahead

  static __m512i load(const void* p) { return _mm512_loadu_si512(p); }

  // exp that takes -inf (a masked score, or the running maximum before the first position) and
  // the NaN of -inf - -inf to 0: ActAvx512::exp is NaN at -inf.
  static __m512 exp0(__m512 x) { return ActAvx512::exp(_mm512_max_ps(x, _mm512_set1_ps(-1e4f))); }

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

  // Accumulators of vdpbf16ps against position pairs hold dimensions as vpunpck[lh]wd leave
  // them: of the 32 dims of one bf16 vector r, lo lane 4L + i is dim 32r + 8L + i and hi lane
  // 4L + i dim 32r + 8L + 4 + i. The dims in order: 32r .. 32r + 15, then 32r + 16 .. 32r + 31.
  static __m512 pair_dims_first(__m512 lo, __m512 hi) {
    return _mm512_permutex2var_ps(lo, _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23), hi);
  }
  static __m512 pair_dims_second(__m512 lo, __m512 hi) {
    return _mm512_permutex2var_ps(lo, _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31),
                                  hi);
  }

  // What the two tiers do differently, each inside one step of the shared loops below
  // (chunk_partials, chunk_values): the multiply-adds of one 32-element piece of four K rows, and
  // the probabilities with one step of P.V over V rows.
#ifdef __AVX512BF16__
  static __m512bh bh(__m512i v) { return reinterpret_cast<__m512bh>(v); }
  using Query = uint16_t;  // q as the input holds it

  // acc[i][h] += q_h . piece p of row i of `rows` (4 rows of D bf16): vdpbf16ps, 32 exact
  // products summed in pairs into 16 f32 lanes.
  template <uint32_t D, uint32_t HB>
  [[gnu::always_inline]] static void piece_partials(__m512 (&acc)[4][HB], const uint16_t* q, const uint16_t* rows, uint32_t p) {
    __m512i x[4];
    #pragma GCC unroll 16
    for (uint32_t i = 0; i < 4; ++i) x[i] = load(rows + size_t{i} * D + 32 * p);
    #pragma GCC unroll 16
    for (uint32_t h = 0; h < HB; ++h) {
      const __m512bh qh = bh(load(q + size_t{h} * D + 32 * p));
      #pragma GCC unroll 16
      for (uint32_t i = 0; i < 4; ++i) acc[i][h] = _mm512_dpbf16_ps(acc[i][h], qh, bh(x[i]));
    }
  }

  // The probabilities rounded to bf16 (as attn_prefill's on this tier), two positions a step: V
  // rows t and t + 1 interleaved (vpunpck[lh]wd) against each head's probability pair, so the
  // accumulators hold dims in pair_dims order. Rows from `count` on are zero in a staged chunk and
  // have probability 0 in place.
  template <uint32_t HB>
  struct Probabilities {
    static constexpr uint32_t kStep = 2;
    __m512i pairs[HB];  // dword j: the bf16 probabilities of positions 2j and 2j + 1
    explicit Probabilities(const float* probs) {
      #pragma GCC unroll 16
      for (uint32_t h = 0; h < HB; ++h)
        pairs[h] = _mm512_castsi256_si512(
            reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(probs + size_t{h} * kAttnPartition))));
    }
    template <uint32_t D, uint32_t PB>
    [[gnu::always_inline]] void step(__m512 (&a)[HB][2 * PB], const uint16_t* v, uint32_t t, uint32_t p0) const {
      __m512bh w[HB];
      const __m512i pair = _mm512_set1_epi32(static_cast<int>(t / 2));
      #pragma GCC unroll 16
      for (uint32_t h = 0; h < HB; ++h) w[h] = bh(_mm512_permutexvar_epi32(pair, pairs[h]));
      #pragma GCC unroll 16
      for (uint32_t p = 0; p < PB; ++p) {
        const __m512i x = load(v + size_t{t} * D + 32 * (p0 + p)), y = load(v + size_t{t + 1} * D + 32 * (p0 + p));
        const __m512bh lo = bh(_mm512_unpacklo_epi16(x, y)), hi = bh(_mm512_unpackhi_epi16(x, y));
        #pragma GCC unroll 16
        for (uint32_t h = 0; h < HB; ++h) {
          a[h][2 * p] = _mm512_dpbf16_ps(a[h][2 * p], w[h], lo);
          a[h][2 * p + 1] = _mm512_dpbf16_ps(a[h][2 * p + 1], w[h], hi);
        }
      }
    }
  };

  // A record's dims from accumulators in pair_dims order.
  static __m512 record_first(__m512 lo, __m512 hi) { return pair_dims_first(lo, hi); }
  static __m512 record_second(__m512 lo, __m512 hi) { return pair_dims_second(lo, hi); }
#else
  using Query = float;  // q widened, split as split_rows leaves it

  // acc[i][h] += q_h . piece p of row i of `rows` (4 rows of D bf16): each K element widened once
  // (even then odd elements), each register load feeding HB pairs of FMAs.
  template <uint32_t D, uint32_t HB>
  [[gnu::always_inline]] static void piece_partials(__m512 (&acc)[4][HB], const float* q, const uint16_t* rows, uint32_t p) {
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    __m512 even[4], odd[4];
    #pragma GCC unroll 16
    for (uint32_t i = 0; i < 4; ++i) {
      const __m512i x = load(rows + size_t{i} * D + 32 * p);
      even[i] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
      odd[i] = _mm512_castsi512_ps(_mm512_and_si512(x, high));
    }
    #pragma GCC unroll 16
    for (uint32_t h = 0; h < HB; ++h) {
      const __m512 qe = _mm512_loadu_ps(q + size_t{h} * D + 32 * p), qo = _mm512_loadu_ps(q + size_t{h} * D + 32 * p + 16);
      #pragma GCC unroll 16
      for (uint32_t i = 0; i < 4; ++i) acc[i][h] = _mm512_fmadd_ps(qo, odd[i], _mm512_fmadd_ps(qe, even[i], acc[i][h]));
    }
  }

  // The probabilities in f32, one position a step: each V row widened once against every head's
  // broadcast probability; the accumulators hold dims split (even, odd) as split_rows.
  template <uint32_t HB>
  struct Probabilities {
    static constexpr uint32_t kStep = 1;
    const float* probs;  // [HB][t], rows kAttnPartition apart
    explicit Probabilities(const float* p) : probs(p) {}
    template <uint32_t D, uint32_t PB>
    [[gnu::always_inline]] void step(__m512 (&a)[HB][2 * PB], const uint16_t* v, uint32_t t, uint32_t p0) const {
      const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
      __m512 w[HB];
      #pragma GCC unroll 16
      for (uint32_t h = 0; h < HB; ++h) w[h] = _mm512_set1_ps(probs[size_t{h} * kAttnPartition + t]);
      #pragma GCC unroll 16
      for (uint32_t p = 0; p < PB; ++p) {
        const __m512i x = load(v + size_t{t} * D + 32 * (p0 + p));
        const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
        const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(x, high));
        #pragma GCC unroll 16
        for (uint32_t h = 0; h < HB; ++h) {
          a[h][2 * p] = _mm512_fmadd_ps(w[h], even, a[h][2 * p]);
          a[h][2 * p + 1] = _mm512_fmadd_ps(w[h], odd, a[h][2 * p + 1]);
        }
      }
    }
  };

  static __m512 record_first(__m512 even, __m512 odd) { return dims_first(even, odd); }
  static __m512 record_second(__m512 even, __m512 odd) { return dims_second(even, odd); }
#endif

  // The partial dot products of HB q heads ([HB][D], Query) with the 16 rows of one chunk (bf16,
  // [16][D]): partial[h][t] is a 16-lane vector whose lane sum is q_h.k_t. Four positions x HB
  // heads a step, one line of the chunk at `ahead` prefetched beside each line read.
  template <uint32_t D, uint32_t HB>
  static void chunk_partials(const Query* q, const uint16_t* k, float* partial, const char* ahead) {
    constexpr uint32_t P = D / 32;  // 32-element pieces per row
    for (uint32_t tb = 0; tb < kChunk; tb += 4) {
      __m512 acc[4][HB];
      for (auto& row : acc)
        for (auto& a : row) a = _mm512_setzero_ps();
      #pragma GCC unroll 16
      for (uint32_t p = 0; p < P; ++p) {
        prefetch_part<D>(ahead, tb / 4 * P + p, kChunk / 4 * P);
        piece_partials<D, HB>(acc, q, k + size_t{tb} * D, p);
      }
      #pragma GCC unroll 16
      for (uint32_t i = 0; i < 4; ++i)
        #pragma GCC unroll 16
        for (uint32_t h = 0; h < HB; ++h) _mm512_store_ps(partial + (size_t{h} * kChunk + tb + i) * 16, acc[i][h]);
    }
  }

  // out[0..16) = scale * the lane sums of head h's 16 partial vectors (chunk_partials' layout).
  static void chunk_scores(const float* partial, uint32_t h, float scale, float* out) {
    __m512 sums[16];
    for (uint32_t j = 0; j < 16; ++j) sums[j] = _mm512_load_ps(partial + (size_t{h} * kChunk + kSumOrder[j]) * 16);
    _mm512_storeu_ps(out, _mm512_mul_ps(sum16(sums), _mm512_set1_ps(scale)));
  }

  // acc[HB][D] (the tier's dim order) += probabilities [HB][t] (rows kAttnPartition apart) x the
  // chunk's V rows t < count (bf16); the pieces in passes of PB so that HB x PB pairs of
  // accumulators stay in registers, the chunk at `ahead` prefetched during the first pass.
  template <uint32_t D, uint32_t HB>
  static void chunk_values(float* acc, const float* probs, const uint16_t* v, uint32_t count, const char* ahead) {
    constexpr uint32_t P = D / 32, PB = P < 8 / HB ? P : 8 / HB;
    const Probabilities<HB> weights(probs);
    constexpr uint32_t kStep = Probabilities<HB>::kStep;
    for (uint32_t p0 = 0; p0 < P; p0 += PB) {
      __m512 a[HB][2 * PB];
      #pragma GCC unroll 16
      for (uint32_t h = 0; h < HB; ++h)
        #pragma GCC unroll 16
        for (uint32_t j = 0; j < 2 * PB; ++j) a[h][j] = _mm512_loadu_ps(acc + size_t{h} * D + 32 * p0 + 16 * j);
      for (uint32_t t = 0; t < count; t += kStep) {
        if (p0 == 0) prefetch_part<D>(ahead, t / kStep, kChunk / kStep);
        weights.template step<D, PB>(a, v, t, p0);
      }
      #pragma GCC unroll 16
      for (uint32_t h = 0; h < HB; ++h)
        #pragma GCC unroll 16
        for (uint32_t j = 0; j < 2 * PB; ++j) _mm512_storeu_ps(acc + size_t{h} * D + 32 * p0 + 16 * j, a[h][j]);
    }
  }

  // Each score row of `s` [rows][512] (n used) to exp(score - its maximum), the maximum and the
  // sum into the row's record.
  static void softmax_rows(float* s, uint32_t rows, uint32_t n, float* const* records) {
    const auto tail = [](uint32_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); };
    for (uint32_t r = 0; r < rows; ++r, s += kAttnPartition) {
      __m512 top = _mm512_set1_ps(-__builtin_inff());
      for (uint32_t t = 0; t < n; t += 16) top = _mm512_mask_max_ps(top, tail(n - t), top, _mm512_loadu_ps(s + t));
      const float max = _mm512_reduce_max_ps(top);
      __m512 sum = _mm512_setzero_ps();
      for (uint32_t t = 0; t < n; t += 16) {
        const __m512 e = _mm512_maskz_mov_ps(tail(n - t), exp0(_mm512_sub_ps(_mm512_loadu_ps(s + t), _mm512_set1_ps(max))));
        sum = _mm512_add_ps(sum, e);
        _mm512_storeu_ps(s + t, e);
      }
      records[r][0] = max;
      records[r][1] = _mm512_reduce_add_ps(sum);
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
    const DecodeScratch<D, 16> sc(scratch, rows);
    w.record_addresses(sc.records);
    if constexpr (std::is_same_v<Query, float>) {
      split_rows<D>(w.query_rows(), sc.q, rows);
      key_scores<AttnAvx512, D>(w, sc.q, sc.scores, sc.partial, sc.stage);
    } else {
      key_scores<AttnAvx512, D>(w, w.query_rows(), sc.scores, sc.partial, sc.stage);
    }
    softmax_rows(sc.scores, rows, n, sc.records);
    std::memset(sc.acc, 0, size_t{rows} * D * sizeof(float));
    value_sums<AttnAvx512, D>(w, sc.scores, sc.acc, sc.stage);
    for (uint32_t r = 0; r < rows; ++r) {
      const float* a = sc.acc + size_t{r} * D;
      for (uint32_t j = 0; j < D / 16; j += 2) {
        const __m512 even = _mm512_loadu_ps(a + 16 * j), odd = _mm512_loadu_ps(a + 16 * j + 16);
        _mm512_storeu_ps(sc.records[r] + 2 + 16 * j, record_first(even, odd));
        _mm512_storeu_ps(sc.records[r] + 2 + 16 * j + 16, record_second(even, odd));
      }
    }
  }

  static void attn_decode(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const DecodeCall c = decode_call(args);
    with_head_dim(c.kv.head_dim, [&](auto d) { decode<decltype(d)::value>(c, bx, by, scratch); });
  }

  static void set(SimdBodies& b) { b[Simd::attn_decode] = &attn_decode; }
};

}  // namespace
}  // namespace metrale::cpu
