// SPDX-License-Identifier: MIT OR Apache-2.0
// W4A16 bodies for the cpu-x86_64-avx512bf16 tier: dot products on `vdpbf16ps`. Codes minus 8
// are small integers, exact in bf16, and the activations are bf16 already, so each group's dot
// runs on bf16 pairs with f32 accumulation and the group scale is applied after, in f32.
// Note: vdpbf16ps treats subnormal bf16 inputs as zero (DAZ); activations below 2^-126 in
// magnitude contribute nothing on this tier.
// GCC 12's AVX-512 intrinsics seed results with a self-initialised "undefined" vector, which
// -Wuninitialized reports wherever they are inlined (GCC bug 105593); silence it for the
// header's own lines only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include "w4a16_simd.hpp"

namespace metrale::cpu::avx512bf16 {
namespace {

// bf16 bits of q - 8 for q = 0..15 (the upper 16 entries are never indexed).
alignas(64) constexpr uint16_t kCodeBf16[32] = {
    0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040, 0xc000, 0xbf80,
    0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
    0,      0,      0,      0,      0,      0,      0,      0,
    0,      0,      0,      0,      0,      0,      0,      0};

struct Isa {
  using vf = __m512;
  using vo = __m512bh;
  using Elem = uint16_t;  // bf16 bits
  static constexpr uint32_t kLanes = 16;
  static constexpr uint32_t kKPerVector = 32;
  static constexpr uint32_t kUnitK = 2;  // a lane holds a (k, k + 1) pair
  static constexpr bool kPreScaled = false;
  static constexpr uint32_t kDotMR = 4, kDotNR = 2;
  static constexpr uint32_t kOuterMR = 8, kOuterNV = 2;

  static __m512i table() { return _mm512_load_si512(kCodeBf16); }

  static float half(uint16_t bits) { return _cvtsh_ss(bits); }
  static vf zero() { return _mm512_setzero_ps(); }
  static vf set1(float value) { return _mm512_set1_ps(value); }
  static vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
  static vf dot(vf acc, vo w, vo x) { return _mm512_dpbf16_ps(acc, w, x); }
  static vo load(const uint16_t* p) { return reinterpret_cast<vo>(_mm512_loadu_si512(p)); }
  static void store(uint16_t* p, vo value) { _mm512_storeu_si512(p, reinterpret_cast<__m512i>(value)); }
  static vf loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, vf value) { _mm512_storeu_ps(p, value); }
  static vo scale(vo w, vf) { return w; }  // never called: kPreScaled is false
  // Not _mm512_reduce_add_ps: GCC 12 warns (maybe-uninitialized) inside it under -Werror.
  static float hsum(vf value) {
    value = _mm512_add_ps(value, _mm512_shuffle_f32x4(value, value, 0x4e));  // swap 256-bit halves
    value = _mm512_add_ps(value, _mm512_shuffle_f32x4(value, value, 0xb1));  // swap 128-bit lanes
    __m128 sum = _mm512_castps512_ps128(value);
    sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
    sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
    return _mm_cvtss_f32(sum);
  }

  // 32 bytes = 64 codes: spread to consecutive bytes in k order, widen to 16-bit indices and
  // look the bf16 value of q - 8 up with one permute.
  static void decode2(const uint8_t* p, vo& a, vo& b) {
    const __m512i words = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512i nibbles = _mm512_or_si512(_mm512_and_si512(words, _mm512_set1_epi16(0x000f)),
                                            _mm512_and_si512(_mm512_slli_epi16(words, 4), _mm512_set1_epi16(0x0f00)));
    const __m512i lut = table();
    a = reinterpret_cast<vo>(_mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(nibbles)), lut));
    b = reinterpret_cast<vo>(_mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(nibbles, 1)), lut));
  }

  // bf16 activations are used as they are.
  static const uint16_t* prepare_x(const uint16_t* src, uint32_t, uint16_t*) { return src; }

  static vo bcast_unit(const uint16_t* p) {
    uint32_t pair;
    __builtin_memcpy(&pair, p, sizeof pair);
    return reinterpret_cast<vo>(_mm512_set1_epi32(static_cast<int>(pair)));
  }

  // Unit u of a row is the code pair (2u, 2u + 1): byte u of the half group's 32 bytes.
  static void decode_t(const uint32_t* base, const int32_t* idx, uint16_t* out, uint32_t stride) {
    const __m512i offsets = _mm512_loadu_si512(idx);
    const __m512i lut = table();
    const __m512i low = _mm512_set1_epi32(0x0f), high = _mm512_set1_epi32(0xf0);
    for (uint32_t w = 0; w < 8; ++w) {
      __m512i words = _mm512_i32gather_epi32(offsets, base + w, 4);
      for (uint32_t j = 0; j < 4; ++j) {
        const __m512i pair = _mm512_or_si512(_mm512_and_si512(words, low),
                                             _mm512_slli_epi32(_mm512_and_si512(words, high), 12));
        _mm512_storeu_si512(out + (w * 4 + j) * stride, _mm512_permutexvar_epi16(pair, lut));
        words = _mm512_srli_epi32(words, 8);
      }
    }
  }
};

// ------------------------------------------------------------ gemv, gemv_b8 on this tier
// The shared gemv decodes codes with a table permute per 32 codes; here a group's 64 bytes
// (128 codes) become four bf16 vectors with one shift and one ternary logic op each, no
// shuffle: a 16-bit word w of the group holds codes 4w..4w+3 (nibbles 0..3), and nibble r
// shifted to mantissa bits 3..6 under the exponent of 16 is the bf16 value 16 + q, exact.
// The activations, shared by every weight row of the block, are permuted once per block to
// match (X_r[w] = x[4w + r]), and each group's dot starts from the lane sums of -24 * x (also
// computed once per block), so a lane accumulates x * (16 + q - 24) = x * (q - 8) in f32.
// Partial sums stay within a few times those of the direct (q - 8) form (bias 24, not 136 as
// with the 0x43xx encoding of 128 + q), far inside the f32 summation budget.
struct Gemv {
  static constexpr uint32_t kChunk = 16384;                      // K per prepared chunk
  static constexpr uint32_t kGroupsPerChunk = kChunk / kGroup;   // 128
  static constexpr size_t kOffPart = 0;                          // f32 [8][64]
  static constexpr size_t kOffX = kOffPart + sizeof(float) * kGemvMaxRows * kGemvRows;
  static constexpr size_t kOffCorr = kOffX + sizeof(uint16_t) * kGemvMaxRows * kChunk;
  static constexpr size_t kOffEnd = kOffCorr + 64 * kGemvMaxRows * kGroupsPerChunk;
  static_assert(kOffEnd <= kScratchBytes && kOffX % 64 == 0 && kOffCorr % 64 == 0);

  // One group's 64 code bytes as bf16 (16 + q) in the permuted order.
  static void decode(const uint8_t* p, __m512i (&w)[4]) {
    const __m512i v = _mm512_loadu_si512(p);
    const __m512i mask = _mm512_set1_epi16(0x0078), bias = _mm512_set1_epi16(0x4180);
    // (a & b) | c: ternlog immediate 0xEA.
    w[0] = _mm512_ternarylogic_epi32(_mm512_slli_epi16(v, 3), mask, bias, 0xea);
    w[1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 1), mask, bias, 0xea);
    w[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 5), mask, bias, 0xea);
    w[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 9), mask, bias, 0xea);
  }

  // `len` activations (a multiple of 128) into the permuted order, and per group the lane sums
  // of -24 * x.
  static void prepare(const uint16_t* src, uint32_t len, uint16_t* dst, float* corr) {
    alignas(64) static constexpr uint16_t kIdx[4][32] = {
#define METRALE_IDX(r)                                                                          \
  {r, 4 + r, 8 + r, 12 + r, 16 + r, 20 + r, 24 + r, 28 + r, 32 + r, 36 + r, 40 + r, 44 + r,  \
   48 + r, 52 + r, 56 + r, 60 + r, r, 4 + r, 8 + r, 12 + r, 16 + r, 20 + r, 24 + r, 28 + r,  \
   32 + r, 36 + r, 40 + r, 44 + r, 48 + r, 52 + r, 56 + r, 60 + r}
        METRALE_IDX(0), METRALE_IDX(1), METRALE_IDX(2), METRALE_IDX(3)
#undef METRALE_IDX
    };
    const __m512i minus24 = _mm512_set1_epi16(static_cast<short>(0xc1c0));  // bf16 -24
    for (uint32_t g = 0; g < len / kGroup; ++g) {
      const uint16_t* s = src + g * kGroup;
      const __m512i a0 = _mm512_loadu_si512(s), a1 = _mm512_loadu_si512(s + 32);
      const __m512i a2 = _mm512_loadu_si512(s + 64), a3 = _mm512_loadu_si512(s + 96);
      __m512 c = _mm512_setzero_ps();
      for (uint32_t r = 0; r < 4; ++r) {
        const __m512i idx = _mm512_load_si512(kIdx[r]);
        const __m512i lo = _mm512_permutex2var_epi16(a0, idx, a1);
        const __m512i hi = _mm512_permutex2var_epi16(a2, idx, a3);
        const __m512i xr = _mm512_inserti64x4(lo, _mm512_castsi512_si256(hi), 1);
        _mm512_storeu_si512(dst + g * kGroup + r * 32, xr);
        c = _mm512_dpbf16_ps(c, reinterpret_cast<__m512bh>(xr), reinterpret_cast<__m512bh>(minus24));
      }
      _mm512_storeu_ps(corr + g * 16, c);
    }
  }

  template <uint32_t MR, uint32_t NR>
  static void micro(const uint16_t* const* xp, const float* const* corr, const uint8_t* const* wb,
                    const uint16_t* const* sp, uint32_t groups, size_t ahead, float (&out)[MR][NR]) {
    __m512 tot[MR][NR];
#pragma GCC unroll 16
    for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (uint32_t j = 0; j < NR; ++j) tot[i][j] = _mm512_setzero_ps();
    for (uint32_t g = 0; g < groups; ++g) {
      __m512i w[NR][4];
#pragma GCC unroll 16
      for (uint32_t j = 0; j < NR; ++j) {
        // The same group of the next row set: rows stream one after another, a chunk of
        // each, too short for the hardware prefetcher to ramp up on its own.
        _mm_prefetch(reinterpret_cast<const char*>(wb[j] + g * 64 + ahead), _MM_HINT_T1);
        decode(wb[j] + g * 64, w[j]);
      }
      float s[NR];
#pragma GCC unroll 16
      for (uint32_t j = 0; j < NR; ++j) s[j] = Isa::half(sp[j][g]);
#pragma GCC unroll 16
      for (uint32_t i = 0; i < MR; ++i) {
        const uint16_t* x = xp[i] + g * kGroup;
        const auto x0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x));
        const auto x1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + 32));
        const auto x2 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + 64));
        const auto x3 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + 96));
        const __m512 c = _mm512_loadu_ps(corr[i] + g * 16);
#pragma GCC unroll 16
        for (uint32_t j = 0; j < NR; ++j) {
          __m512 a = _mm512_dpbf16_ps(c, reinterpret_cast<__m512bh>(w[j][0]), x0);
          __m512 b = _mm512_dpbf16_ps(_mm512_setzero_ps(), reinterpret_cast<__m512bh>(w[j][2]), x2);
          a = _mm512_dpbf16_ps(a, reinterpret_cast<__m512bh>(w[j][1]), x1);
          b = _mm512_dpbf16_ps(b, reinterpret_cast<__m512bh>(w[j][3]), x3);
          tot[i][j] = _mm512_fmadd_ps(_mm512_add_ps(a, b), _mm512_set1_ps(s[j]), tot[i][j]);
        }
      }
    }
#pragma GCC unroll 16
    for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (uint32_t j = 0; j < NR; ++j) out[i][j] = Isa::hsum(tot[i][j]);
  }

  template <uint32_t MR, uint32_t NR>
  static void rows(const uint16_t* const* xp, const float* const* corr, const W4a16Call& c,
                   uint32_t row, uint32_t kc, uint32_t groups, float* part, uint32_t col) {
    const auto* codes = reinterpret_cast<const uint8_t*>(c.qweight);
    const uint8_t* wb[NR];
    const uint16_t* sp[NR];
#pragma GCC unroll 16
    for (uint32_t j = 0; j < NR; ++j) {
      wb[j] = codes + static_cast<size_t>(row + j) * (c.k / 2) + kc / 2;
      sp[j] = c.scales + static_cast<size_t>(row + j) * (c.k / kGroup) + kc / kGroup;
    }
    float out[MR][NR];
    micro<MR, NR>(xp, corr, wb, sp, groups, size_t{NR} * (c.k / 2), out);
#pragma GCC unroll 16
    for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (uint32_t j = 0; j < NR; ++j) part[i * kGemvRows + col + j] += out[i][j];
  }

  template <uint32_t MR>
  static void chunk(const uint16_t* const* xp, const float* const* corr, const W4a16Call& c,
                    uint32_t n0, uint32_t nt, uint32_t kc, uint32_t groups, float* part) {
    // Each decoded group feeds NR rows of MR activations: more weight rows per x load as MR grows
    // (the activations come from L1; the accumulators, MR x NR, stay in registers).
    constexpr uint32_t NR = MR <= 2 ? 4 : 2;
    uint32_t col = 0;
    for (; col + NR <= nt; col += NR) rows<MR, NR>(xp, corr, c, n0 + col, kc, groups, part, col);
    for (; col < nt; ++col) rows<MR, 1>(xp, corr, c, n0 + col, kc, groups, part, col);
  }

  static void block(const KernelArgs& args, uint32_t bx, unsigned char* scratch) {
    const W4a16Call c = w4a16_call(args);
    const uint32_t n0 = bx * kGemvRows;
    if (n0 >= c.n) return;
    run(c, n0, min_u32(kGemvRows, c.n - n0), scratch);
  }

  // Grouped GEMM: an expert with at most 8 rows (decode, small batches) takes this path on its
  // 128-column tile (two GEMV column blocks); larger ones the shared tile GEMM.
  static void grouped(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const GroupedCall g = grouped_call(args);
    const uint32_t n0 = bx * kTileN;
    if (n0 >= g.n || by >= g.experts) return;
    const auto first = static_cast<uint32_t>(g.offsets[by]);
    const auto last = static_cast<uint32_t>(g.offsets[by + 1]);
    if (last <= first) return;
    if (last - first > kGemvMaxRows) {
      W4a16Simd<Isa>::grouped_block(args, bx, by, scratch);
      return;
    }
    const W4a16Call c{g.x + static_cast<size_t>(first) * g.k,
                      g.qweight + by * (static_cast<size_t>(g.n) * (g.k / 8)),
                      g.scales + by * (static_cast<size_t>(g.n) * (g.k / kGroup)),
                      g.y + static_cast<size_t>(first) * g.n,
                      last - first, g.n, g.k};
    for (uint32_t c0 = n0; c0 < min_u32(n0 + kTileN, g.n); c0 += kGemvRows)
      run(c, c0, min_u32(kGemvRows, g.n - c0), scratch);
  }

  static void run(const W4a16Call& c, uint32_t n0, uint32_t nt, unsigned char* scratch) {
    float* part = scratch_at<float>(scratch, kOffPart);
    uint16_t* xbuf = scratch_at<uint16_t>(scratch, kOffX);
    float* cbuf = scratch_at<float>(scratch, kOffCorr);
    for (uint32_t i = 0; i < c.m * kGemvRows; ++i) part[i] = 0.0f;
    // K chunk: the prepared activations of all m rows (320 bytes per row and group) stay
    // within about 24 KiB, i.e. in L1 while the block's weight rows stream past them.
    const uint32_t span = min_u32(kChunk, (c.m == 1 ? 64 : 72 / c.m < 4 ? 4 : 72 / c.m) * kGroup);
    for (uint32_t kc = 0; kc < c.k; kc += span) {
      const uint32_t len = min_u32(span, c.k - kc);
      const uint16_t* xp[kGemvMaxRows];
      const float* corr[kGemvMaxRows];
      for (uint32_t i = 0; i < c.m; ++i) {
        uint16_t* dst = xbuf + static_cast<size_t>(i) * kChunk;
        float* cd = cbuf + static_cast<size_t>(i) * kGroupsPerChunk * 16;
        prepare(c.x + static_cast<size_t>(i) * c.k + kc, len, dst, cd);
        xp[i] = dst;
        corr[i] = cd;
      }
      const uint32_t groups = len / kGroup;
      switch (c.m) {
        case 1: chunk<1>(xp, corr, c, n0, nt, kc, groups, part); break;
        case 2: chunk<2>(xp, corr, c, n0, nt, kc, groups, part); break;
        case 3: chunk<3>(xp, corr, c, n0, nt, kc, groups, part); break;
        case 4: chunk<4>(xp, corr, c, n0, nt, kc, groups, part); break;
        case 5: chunk<5>(xp, corr, c, n0, nt, kc, groups, part); break;
        case 6: chunk<6>(xp, corr, c, n0, nt, kc, groups, part); break;
        case 7: chunk<7>(xp, corr, c, n0, nt, kc, groups, part); break;
        default: chunk<8>(xp, corr, c, n0, nt, kc, groups, part); break;
      }
    }
    for (uint32_t i = 0; i < c.m; ++i)
      for (uint32_t j = 0; j < nt; ++j)
        c.y[static_cast<size_t>(i) * c.n + n0 + j] = f32_to_bf16(part[i * kGemvRows + j]);
  }
};

}  // namespace

W4a16Bodies bodies() {
  W4a16Bodies b = W4a16Simd<Isa>::bodies();
  b.gemv = [](const KernelArgs& a, uint32_t bx, uint32_t, unsigned char* s) { Gemv::block(a, bx, s); };
  b.gemv_b8 = b.gemv;
  b.grouped_gemm = &Gemv::grouped;
  return b;
}

}  // namespace metrale::cpu::avx512bf16
