// SPDX-License-Identifier: MIT OR Apache-2.0
// The cpu-x86_64-avx512bf16 tier: every W4A16 body reads the 16-column panel layout that this
// tier's w4a16_repack writes at load, and computes on `vdpbf16ps`.
//
// The layout is described in panel_layout.hpp. Decoding a 64-byte unit (16 columns x 8 k) takes
// one shift and one ternary-logic op per r: 16 lanes of bf16 pairs (16 + q[2r], 16 + q[2r + 1]),
// the exact operand of `vdpbf16ps` against a broadcast activation pair. Each decoded vector feeds
// every activation row of the block, and the group scale is one FMA per 64 dot instructions.
// A lane accumulates x * (16 + q) starting from -24 * sum(x) over the group (computed once per
// row and group), so it ends at x * (q - 8) in f32; partial sums stay within a few times those
// of the direct form, far inside the f32 summation budget.
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

#include "panel_layout.hpp"

namespace metrale::cpu::avx512bf16 {
namespace {

constexpr uint32_t kChunkGroups = 16;                // K per pass over a block's panels: 2048
constexpr uint32_t kMaxRows = 8;                     // activation rows per micro-kernel call
constexpr uint32_t kBlockCols = kTileN;              // widest block: 128 columns, 8 panels
// Scratch: accumulators f32 [kTileM][kBlockCols] | group corrections f32 [kTileM][kChunkGroups].
constexpr size_t kOffTot = 0;
constexpr size_t kOffCorr = kOffTot + sizeof(float) * kTileM * kBlockCols;
static_assert(kOffCorr + sizeof(float) * kTileM * kChunkGroups <= kScratchBytes);
static_assert(kGemvRows <= kBlockCols && kGemvMaxRows <= kTileM);

// Decoded pair vector r (0..3) of a unit: per 16-bit word, nibble r moved to mantissa bits 3..6
// under the exponent of 16, i.e. the bf16 value 16 + q.
template <uint32_t R>
inline __m512bh decode(__m512i unit) {
  const __m512i mask = _mm512_set1_epi16(0x0078), bias = _mm512_set1_epi16(0x4180);
  const __m512i shifted = R == 0 ? _mm512_slli_epi16(unit, 3) : _mm512_srli_epi16(unit, 4 * R - 3);
  return reinterpret_cast<__m512bh>(_mm512_ternarylogic_epi32(shifted, mask, bias, 0xea));  // (a & b) | c
}

inline __m512bh bcast_pair(const uint16_t* p) {
  int32_t pair;
  __builtin_memcpy(&pair, p, sizeof pair);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
}

// MR activation rows times NV panels over `groups` groups starting at group g0 of the chunk.
// Full panels (kTail false) are 16 wide; a tail panel (NV = 1) has `width` < 16 lanes, read and
// written under a mask. tot rows have stride kBlockCols; corr rows stride kChunkGroups.
template <uint32_t MR, uint32_t NV, bool kTail>
void micro(const uint16_t* const* x, const float* corr, const PanelRef* panels, uint32_t g0,
           uint32_t groups, float* tot) {
  const uint32_t width = kTail ? panels[0].width : kPanel;
  const __mmask16 lanes = static_cast<__mmask16>((1u << width) - 1u);
  const size_t unit_bytes = size_t{width} * 4;
  const uint8_t* codes[NV];
  const uint16_t* scales[NV];
#pragma GCC unroll 4
  for (uint32_t v = 0; v < NV; ++v) {
    codes[v] = panels[v].codes + static_cast<size_t>(g0) * kUnitsPerGroup * unit_bytes;
    scales[v] = panels[v].scales + static_cast<size_t>(g0) * width;
  }
  for (uint32_t g = 0; g < groups; ++g) {
    __m512 acc[MR][NV];
#pragma GCC unroll 8
    for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (uint32_t v = 0; v < NV; ++v) acc[i][v] = _mm512_set1_ps(corr[i * kChunkGroups + g]);
    const uint32_t kx = (g0 + g) * kGroup;  // activation offset of this group within the chunk
    for (uint32_t j = 0; j < kUnitsPerGroup; ++j) {
      __m512i unit[NV];
#pragma GCC unroll 4
      for (uint32_t v = 0; v < NV; ++v) {
        const uint8_t* p = codes[v] + (static_cast<size_t>(g) * kUnitsPerGroup + j) * unit_bytes;
        // Panels stream side by side; help the prefetcher see each stream early.
        _mm_prefetch(reinterpret_cast<const char*>(p + 8 * unit_bytes), _MM_HINT_T0);
        unit[v] = kTail ? _mm512_maskz_loadu_epi32(lanes, p) : _mm512_loadu_si512(p);
      }
      const uint32_t k8 = kx + j * 8;
#define METRALE_STEP(R)                                                                   \
  {                                                                                       \
    __m512bh w[NV];                                                                       \
    _Pragma("GCC unroll 4") for (uint32_t v = 0; v < NV; ++v) w[v] = decode<R>(unit[v]);  \
    _Pragma("GCC unroll 8") for (uint32_t i = 0; i < MR; ++i) {                           \
      const __m512bh xb = bcast_pair(x[i] + k8 + 2 * (R));                                \
      _Pragma("GCC unroll 4") for (uint32_t v = 0; v < NV; ++v)                           \
          acc[i][v] = _mm512_dpbf16_ps(acc[i][v], w[v], xb);                              \
    }                                                                                     \
  }
      METRALE_STEP(0)
      METRALE_STEP(1)
      METRALE_STEP(2)
      METRALE_STEP(3)
#undef METRALE_STEP
    }
#pragma GCC unroll 4
    for (uint32_t v = 0; v < NV; ++v) {
      const __m256i half = kTail ? _mm256_maskz_loadu_epi16(lanes, scales[v] + static_cast<size_t>(g) * width)
                                 : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales[v] + static_cast<size_t>(g) * width));
      const __m512 s = _mm512_cvtph_ps(half);
#pragma GCC unroll 8
      for (uint32_t i = 0; i < MR; ++i) {
        float* t = tot + i * kBlockCols + v * kPanel;
        if constexpr (kTail)
          _mm512_mask_storeu_ps(t, lanes, _mm512_fmadd_ps(acc[i][v], s, _mm512_maskz_loadu_ps(lanes, t)));
        else
          _mm512_storeu_ps(t, _mm512_fmadd_ps(acc[i][v], s, _mm512_loadu_ps(t)));
      }
    }
  }
}

// Every panel of a block for MR rows: as many panels per call as the accumulators allow
// (MR x NV <= 16 zmm), then a masked call for a partial last panel.
template <uint32_t MR>
void rows(const uint16_t* const* x, const float* corr, const PanelRef* panels, uint32_t count,
          uint32_t g0, uint32_t groups, float* tot) {
  constexpr uint32_t kWide = MR <= 4 ? 4 : 2;
  uint32_t p = 0;
  const uint32_t full = panels[count - 1].width == kPanel ? count : count - 1;
  for (; p + kWide <= full; p += kWide) micro<MR, kWide, false>(x, corr, panels + p, g0, groups, tot + p * kPanel);
  if constexpr (kWide > 2)
    for (; p + 2 <= full; p += 2) micro<MR, 2, false>(x, corr, panels + p, g0, groups, tot + p * kPanel);
  for (; p < full; ++p) micro<MR, 1, false>(x, corr, panels + p, g0, groups, tot + p * kPanel);
  if (p < count) micro<MR, 1, true>(x, corr, panels + p, g0, groups, tot + p * kPanel);
}

// -24 * sum(x) over each group of the chunk, for `count` rows (f32 from bf16 pairs).
void corrections(const uint16_t* const* x, uint32_t count, uint32_t kx, uint32_t groups, float* corr) {
  const __m512bh minus24 = reinterpret_cast<__m512bh>(_mm512_set1_epi16(static_cast<short>(0xc1c0)));
  for (uint32_t i = 0; i < count; ++i)
    for (uint32_t g = 0; g < groups; ++g) {
      const uint16_t* p = x[i] + kx + g * kGroup;
      __m512 c = _mm512_setzero_ps();
#pragma GCC unroll 4
      for (uint32_t t = 0; t < kGroup; t += 32)
        c = _mm512_dpbf16_ps(c, reinterpret_cast<__m512bh>(_mm512_loadu_si512(p + t)), minus24);
      // Not _mm512_reduce_add_ps: GCC 12 warns (maybe-uninitialized) inside it under -Werror.
      c = _mm512_add_ps(c, _mm512_shuffle_f32x4(c, c, 0x4e));
      c = _mm512_add_ps(c, _mm512_shuffle_f32x4(c, c, 0xb1));
      __m128 s = _mm512_castps512_ps128(c);
      s = _mm_add_ps(s, _mm_movehl_ps(s, s));
      s = _mm_add_ss(s, _mm_movehdup_ps(s));
      corr[i * kChunkGroups + g] = _mm_cvtss_f32(s);
    }
}

// Rows [0, mt) (mt <= kTileM) of x (row stride k) times columns [n0, n0 + nt) (n0 a multiple of
// 16, nt <= kBlockCols) of one panel-layout matrix, into y (row stride n).
void block(const uint16_t* x, uint32_t mt, const uint8_t* codes, const uint16_t* scales, uint32_t n,
           uint32_t k, uint32_t n0, uint32_t nt, uint16_t* y, unsigned char* scratch) {
  float* tot = scratch_at<float>(scratch, kOffTot);
  float* corr = scratch_at<float>(scratch, kOffCorr);
  for (uint32_t i = 0; i < mt; ++i)
    for (uint32_t j = 0; j < nt; ++j) tot[i * kBlockCols + j] = 0.0f;
  PanelRef panels[kBlockCols / kPanel];
  const uint32_t count = (nt + kPanel - 1) / kPanel;
  for (uint32_t p = 0; p < count; ++p) panels[p] = panel_ref(codes, scales, n, k, n0 / kPanel + p);
  const uint32_t groups = k / kGroup;
  for (uint32_t g0 = 0; g0 < groups; g0 += kChunkGroups) {
    const uint32_t gn = min_u32(kChunkGroups, groups - g0);
    for (uint32_t r0 = 0; r0 < mt; r0 += kMaxRows) {
      const uint32_t mr = min_u32(kMaxRows, mt - r0);
      const uint16_t* xr[kMaxRows];
      for (uint32_t i = 0; i < mr; ++i) xr[i] = x + static_cast<size_t>(r0 + i) * k;
      float* c = corr + r0 * kChunkGroups;
      corrections(xr, mr, g0 * kGroup, gn, c);
      float* t = tot + r0 * kBlockCols;
      switch (mr) {
        case 1: rows<1>(xr, c, panels, count, g0, gn, t); break;
        case 2: rows<2>(xr, c, panels, count, g0, gn, t); break;
        case 3: rows<3>(xr, c, panels, count, g0, gn, t); break;
        case 4: rows<4>(xr, c, panels, count, g0, gn, t); break;
        case 5: rows<5>(xr, c, panels, count, g0, gn, t); break;
        case 6: rows<6>(xr, c, panels, count, g0, gn, t); break;
        case 7: rows<7>(xr, c, panels, count, g0, gn, t); break;
        default: rows<8>(xr, c, panels, count, g0, gn, t); break;
      }
    }
  }
  for (uint32_t i = 0; i < mt; ++i)
    for (uint32_t j = 0; j < nt; ++j)
      y[static_cast<size_t>(i) * n + n0 + j] = f32_to_bf16(tot[i * kBlockCols + j]);
}

// ------------------------------------------------------------------------------ the bodies
// gemv / gemv_b8: N64 blocks, all m (<= 8) rows at once.
void gemv(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char* scratch) {
  const W4a16Call c = w4a16_call(args);
  const uint32_t n0 = bx * kGemvRows;
  if (n0 >= c.n) return;
  block(c.x, min_u32(c.m, kGemvMaxRows), reinterpret_cast<const uint8_t*>(c.qweight), c.scales, c.n, c.k, n0,
        min_u32(kGemvRows, c.n - n0), c.y, scratch);
}

// gemm_t / gemm_t_k64: N128 x M64 tiles. One body serves both: the panel layout already streams
// K in 64-byte units, which is what the deep-K variant exists for on other tiers.
void gemm_t(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  const W4a16Call c = w4a16_call(args);
  const uint32_t n0 = bx * kTileN, m0 = by * kTileM;
  if (n0 >= c.n || m0 >= c.m) return;
  block(c.x + static_cast<size_t>(m0) * c.k, min_u32(kTileM, c.m - m0), reinterpret_cast<const uint8_t*>(c.qweight),
        c.scales, c.n, c.k, n0, min_u32(kTileN, c.n - n0), c.y + static_cast<size_t>(m0) * c.n, scratch);
}

// Grouped GEMM: expert `by`'s rows in tile-height chunks over its 128-column tile; the tile's
// panels stay cached between chunks, so tokens routed to one expert share one pass over DRAM.
void grouped(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  const GroupedCall g = grouped_call(args);
  const uint32_t n0 = bx * kTileN;
  if (n0 >= g.n || by >= g.experts) return;
  const auto first = static_cast<uint32_t>(g.offsets[by]);
  const auto last = static_cast<uint32_t>(g.offsets[by + 1]);
  const auto* codes = reinterpret_cast<const uint8_t*>(g.qweight) + by * (static_cast<size_t>(g.n) * (g.k / 2));
  const uint16_t* scales = g.scales + by * (static_cast<size_t>(g.n) * (g.k / kGroup));
  for (uint32_t r = first; r < last; r += kTileM)
    block(g.x + static_cast<size_t>(r) * g.k, min_u32(kTileM, last - r), codes, scales, g.n, g.k, n0,
          min_u32(kTileN, g.n - n0), g.y + static_cast<size_t>(r) * g.n, scratch);
}

}  // namespace

W4a16Bodies bodies() {
  W4a16Bodies b{};
  b.gemv = &gemv;
  b.gemv_b8 = &gemv;
  b.gemm_t = &gemm_t;
  b.gemm_t_k64 = &gemm_t;
  b.grouped_gemm = &grouped;
  b.repack = &panel_repack;
  return b;
}

}  // namespace metrale::cpu::avx512bf16
