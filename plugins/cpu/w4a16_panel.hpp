// SPDX-License-Identifier: MIT OR Apache-2.0
// The W4A16 family on the 16-column panel layout (panel_layout.hpp), written once over an
// instruction-set description `I`: each SIMD tier's TU defines its `Isa` and takes its bodies
// from PanelKernels<Isa>::bodies(). Everything is in an anonymous namespace, so each TU's
// instantiations are its own (see numeric.hpp for why that matters with per-TU -m flags). Use no
// std:: function here: an out-of-line std template instantiated under -mavx512f could be shared
// with baseline code (std::integer_sequence below is a type only).
//
// The outer-product form: columns along the vector lanes, one 64-byte unit (16 columns x 8 k)
// loaded per panel and decoded in registers, each decoded vector feeding every activation row of
// the micro-kernel against a broadcast activation. A lane accumulates x * (16 + q) starting from
// -24 * sum(x) over the group (the correction, computed once per row and group), so it ends the
// group at x * (q - 8); the group scale is then one FMA into the running total. Partial sums stay
// within a few times those of the direct form, far inside the f32 summation budget.
//
// Loop structure of a block (rows [0, mt) x columns [n0, n0 + nt), nt <= 128): K in chunks of
// kChunkGroups groups; per chunk, activation rows in blocks of up to I::kMaxRows are prepared
// (I::prepare) and their corrections computed, then every panel of the block is swept for those
// rows, I::panels(MR) panels per micro-kernel call. Accumulators (MR rows x NP panels) live in
// registers; the running totals of the block in scratch.
//
// What `I` provides (all static):
//   vf      f32 vector of kLanes lanes (accumulators, scales, totals); kLanes divides 16, so a
//           panel is kPanel / kLanes vectors;
//   vu      raw code vector: kLanes u32 lanes of a unit;
//   vw, vx  operands of dot: decoded weights and broadcast activations;
//   Act     element of prepared activations (float; bf16 bits for a bf16-pair tier);
//   kSteps  dot steps per 8-k unit (8: one k per step; 4: (k, k + 1) pairs);
//   kMaxRows activation rows per micro-kernel call (<= kTileM): blocks of kMaxRows rows while
//           that many are left, then up to kGemvMaxRows (or kMaxRows if less) at a time;
//   panels(mr) panels per micro-kernel call for mr rows (mr x panels x kPanel / kLanes
//           accumulators must fit the register file);
//   load_codes(p) / load_codes_tail(p, valid): kLanes lanes of a unit at p (only the first
//           `valid` lanes, 0..kLanes, read; the others zero);
//   decode<S>(vu): the weight operand of step S (0..kSteps-1) of the unit, i.e. 16 + q for the
//           k (or k pair) of the step; k = 2r sits at bits 4r of a lane, k = 2r + 1 at 16 + 4r;
//   bcast(p): activations p[0 .. 8 / kSteps) broadcast as a dot operand;
//   dot(acc, w, x): acc + w * x per lane (summing the pair for a bf16-pair tier);
//   set1, fma(a, b, c) = a * b + c, loadf / storef (unaligned f32 vector);
//   scales(p) / scales_tail(p, valid): kLanes f16 group scales at p as f32 (tail: first `valid`
//           read, the others zero);
//   prepare(src, len, dst): activations src[0, len) (bf16, len a multiple of kGroup) as Act,
//           written to dst (room for kChunkGroups * kGroup) or returned in place;
//   correction(p): -24 * the sum of the kGroup prepared activations at p, as f32.
#pragma once

#include <utility>

#include "panel_layout.hpp"

namespace metrale::cpu {
namespace {

template <class I>
struct PanelKernels {
  using vf = typename I::vf;
  using vu = typename I::vu;
  using Act = typename I::Act;
  static constexpr uint32_t kLanes = I::kLanes;
  static constexpr uint32_t kVecs = kPanel / kLanes;  // vectors per panel
  static constexpr uint32_t kSteps = I::kSteps;
  static constexpr uint32_t kStepK = 8 / kSteps;      // k per dot step
  static constexpr uint32_t kMaxRows = I::kMaxRows;
  // Row blocks: kMaxRows while that many are left, then at most kSmallRows at a time.
  static constexpr uint32_t kSmallRows = kMaxRows < kGemvMaxRows ? kMaxRows : kGemvMaxRows;
  static constexpr uint32_t kChunkGroups = 16;        // K per pass over a block's panels: 2048
  static constexpr uint32_t kChunkK = kChunkGroups * kGroup;
  static constexpr uint32_t kBlockCols = kTileN;      // widest block: 128 columns, 8 panels
  static constexpr uint32_t kStartLines = 8;          // lines of each panel prefetched up front
  static_assert(kPanel % kLanes == 0 && 8 % kSteps == 0);
  static_assert(kMaxRows >= 1 && kMaxRows <= kTileM && kGemvRows <= kBlockCols);

  // Scratch: totals f32 [kTileM][kBlockCols] | corrections f32 [kMaxRows][kChunkGroups] |
  // prepared activations Act [kMaxRows][kXStride]. The rows of prepared activations are one
  // cache line longer than a chunk so that the rows' broadcasts (same k, kMaxRows rows) fall in
  // different L1 sets.
  static constexpr uint32_t kXStride = kChunkK + 64 / sizeof(Act);
  static constexpr size_t kOffTot = 0;
  static constexpr size_t kOffCorr = kOffTot + sizeof(float) * kTileM * kBlockCols;
  static constexpr size_t kOffX = (kOffCorr + sizeof(float) * kMaxRows * kChunkGroups + 63) / 64 * 64;
  static_assert(kOffX + sizeof(Act) * kMaxRows * kXStride <= kScratchBytes);

  // One unit (8 k) of MR rows x NV vectors: kSteps decode + broadcast + dot steps.
  template <uint32_t MR, uint32_t NV, uint32_t... S>
  [[gnu::always_inline]] static inline void unit_steps(vf (&acc)[MR][NV], const vu (&unit)[NV],
                                                       const Act* const* x, uint32_t kx,
                                                       std::integer_sequence<uint32_t, S...>) {
    (
        [&] {
          typename I::vw w[NV];
#pragma GCC unroll 16
          for (uint32_t v = 0; v < NV; ++v) w[v] = I::template decode<S>(unit[v]);
#pragma GCC unroll 16
          for (uint32_t i = 0; i < MR; ++i) {
            const typename I::vx xb = I::bcast(x[i] + kx + S * kStepK);
#pragma GCC unroll 16
            for (uint32_t v = 0; v < NV; ++v) acc[i][v] = I::dot(acc[i][v], w[v], xb);
          }
        }(),
        ...);
  }

  // MR activation rows times NP panels over `groups` groups starting at group g0 of the chunk.
  // Full panels (kTail false) are 16 wide; a tail panel (NP = 1) has `width` < 16 lanes, its
  // codes and scales read under a mask. x rows are the chunk's prepared activations; tot rows
  // have stride kBlockCols (a tail panel's totals are written in full: the block keeps all 16
  // columns of each panel); corr rows stride kChunkGroups.
  template <uint32_t MR, uint32_t NP, bool kTail>
  static void micro(const Act* const* x, const float* corr, const PanelRef* panels, uint32_t g0,
                    uint32_t groups, float* tot) {
    constexpr uint32_t NV = NP * kVecs;
    const uint32_t width = kTail ? panels[0].width : kPanel;
    const size_t unit_bytes = size_t{width} * 4;
    uint32_t valid[kVecs];
#pragma GCC unroll 4
    for (uint32_t h = 0; h < kVecs; ++h) {
      const uint32_t first = h * kLanes;
      valid[h] = width <= first ? 0 : min_u32(kLanes, width - first);
    }
    const uint8_t* codes[NP];
    const uint16_t* scales[NP];
#pragma GCC unroll 8
    for (uint32_t p = 0; p < NP; ++p) {
      codes[p] = panels[p].codes + static_cast<size_t>(g0) * kUnitsPerGroup * unit_bytes;
      scales[p] = panels[p].scales + static_cast<size_t>(g0) * width;
    }
    for (uint32_t g = 0; g < groups; ++g) {
      vf acc[MR][NV];
#pragma GCC unroll 16
      for (uint32_t i = 0; i < MR; ++i) {
        const vf c = I::set1(corr[i * kChunkGroups + g]);
#pragma GCC unroll 16
        for (uint32_t v = 0; v < NV; ++v) acc[i][v] = c;
      }
      for (uint32_t j = 0; j < kUnitsPerGroup; ++j) {
        vu unit[NV];
#pragma GCC unroll 8
        for (uint32_t p = 0; p < NP; ++p) {
          const uint8_t* u = codes[p] + (static_cast<size_t>(g) * kUnitsPerGroup + j) * unit_bytes;
          // Panels stream side by side; help the prefetcher see each stream early: 2 KiB ahead
          // into L2 (measured on Zen 4: +12% on one thread against 512 B ahead into L1).
          __builtin_prefetch(u + 32 * unit_bytes, 0, 2);
#pragma GCC unroll 4
          for (uint32_t h = 0; h < kVecs; ++h)
            unit[p * kVecs + h] = kTail ? I::load_codes_tail(u + h * kLanes * 4, valid[h])
                                        : I::load_codes(u + h * kLanes * 4);
        }
        unit_steps<MR, NV>(acc, unit, x, (g * kUnitsPerGroup + j) * 8,
                           std::make_integer_sequence<uint32_t, kSteps>{});
      }
#pragma GCC unroll 8
      for (uint32_t p = 0; p < NP; ++p)
#pragma GCC unroll 4
        for (uint32_t h = 0; h < kVecs; ++h) {
          const uint16_t* sp = scales[p] + static_cast<size_t>(g) * width + h * kLanes;
          const vf s = kTail ? I::scales_tail(sp, valid[h]) : I::scales(sp);
#pragma GCC unroll 16
          for (uint32_t i = 0; i < MR; ++i) {
            float* t = tot + i * kBlockCols + (p * kVecs + h) * kLanes;
            I::storef(t, I::fma(acc[i][p * kVecs + h], s, I::loadf(t)));
          }
        }
    }
  }

  // Every panel of a block for MR rows: I::panels(MR) panels per call, narrower calls for the
  // rest, then a masked call for a partial last panel.
  template <uint32_t MR>
  static void rows(const Act* const* x, const float* corr, const PanelRef* panels, uint32_t count,
                   uint32_t g0, uint32_t groups, float* tot) {
    constexpr uint32_t kWide = I::panels(MR);
    static_assert(kWide >= 1);
    uint32_t p = 0;
    const uint32_t full = panels[count - 1].width == kPanel ? count : count - 1;
    for (; p + kWide <= full; p += kWide) micro<MR, kWide, false>(x, corr, panels + p, g0, groups, tot + p * kPanel);
    if constexpr (kWide > 4)
      for (; p + 4 <= full; p += 4) micro<MR, 4, false>(x, corr, panels + p, g0, groups, tot + p * kPanel);
    if constexpr (kWide > 2)
      for (; p + 2 <= full; p += 2) micro<MR, 2, false>(x, corr, panels + p, g0, groups, tot + p * kPanel);
    if constexpr (kWide > 1)
      for (; p < full; ++p) micro<MR, 1, false>(x, corr, panels + p, g0, groups, tot + p * kPanel);
    if (p < count) micro<MR, 1, true>(x, corr, panels + p, g0, groups, tot + p * kPanel);
  }

  template <uint32_t MR>
  static void rows_for(uint32_t mr, const Act* const* x, const float* corr, const PanelRef* panels,
                       uint32_t count, uint32_t g0, uint32_t groups, float* tot) {
    if constexpr (MR > 1)
      if (mr < MR) return rows_for<MR - 1>(mr, x, corr, panels, count, g0, groups, tot);
    rows<MR>(x, corr, panels, count, g0, groups, tot);
  }

  // Rows [0, mt) (mt <= kTileM) of x (row stride k) times columns [n0, n0 + nt) (n0 a multiple
  // of 16, nt <= kBlockCols) of one panel-layout matrix, into y (row stride n).
  static void block(const uint16_t* x, uint32_t mt, const uint8_t* codes, const uint16_t* scales,
                    uint32_t n, uint32_t k, uint32_t n0, uint32_t nt, uint16_t* y,
                    unsigned char* scratch) {
    float* tot = scratch_at<float>(scratch, kOffTot);
    float* corr = scratch_at<float>(scratch, kOffCorr);
    Act* xbuf = scratch_at<Act>(scratch, kOffX);
    const uint32_t count = (nt + kPanel - 1) / kPanel;
    for (uint32_t i = 0; i < mt; ++i)
      for (uint32_t j = 0; j < count * kPanel; ++j) tot[i * kBlockCols + j] = 0.0f;
    PanelRef panels[kBlockCols / kPanel];
    for (uint32_t p = 0; p < count; ++p) {
      panels[p] = panel_ref(codes, scales, n, k, n0 / kPanel + p);
      // A block's panels are short streams (a MoE expert tile: a few KiB each): start them all
      // at once rather than wait for the hardware prefetcher to notice each in turn.
      for (uint32_t line = 0; line < kStartLines; ++line) __builtin_prefetch(panels[p].codes + line * 64, 0, 3);
    }
    const uint32_t groups = k / kGroup;
    for (uint32_t g0 = 0; g0 < groups; g0 += kChunkGroups) {
      const uint32_t gn = min_u32(kChunkGroups, groups - g0);
      for (uint32_t r0 = 0, mr = 0; r0 < mt; r0 += mr) {
        mr = mt - r0 >= kMaxRows ? kMaxRows : min_u32(kSmallRows, mt - r0);
        const Act* xr[kMaxRows];
        for (uint32_t i = 0; i < mr; ++i) {
          xr[i] = I::prepare(x + static_cast<size_t>(r0 + i) * k + g0 * kGroup, gn * kGroup,
                             xbuf + static_cast<size_t>(i) * kXStride);
          for (uint32_t g = 0; g < gn; ++g) corr[i * kChunkGroups + g] = I::correction(xr[i] + g * kGroup);
        }
        if (mr == kMaxRows)
          rows<kMaxRows>(xr, corr, panels, count, g0, gn, tot + r0 * kBlockCols);
        else
          rows_for<kSmallRows>(mr, xr, corr, panels, count, g0, gn, tot + r0 * kBlockCols);
      }
    }
    for (uint32_t i = 0; i < mt; ++i)
      for (uint32_t j = 0; j < nt; ++j)
        y[static_cast<size_t>(i) * n + n0 + j] = f32_to_bf16(tot[i * kBlockCols + j]);
  }

  // ---------------------------------------------------------------------------- the bodies
  // gemv / gemv_b8: N64 blocks, all m (<= 8) rows.
  static void gemv(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char* scratch) {
    const W4a16Call c = w4a16_call(args);
    const uint32_t n0 = bx * kGemvRows;
    if (n0 >= c.n) return;
    block(c.x, min_u32(c.m, kGemvMaxRows), reinterpret_cast<const uint8_t*>(c.qweight), c.scales, c.n,
          c.k, n0, min_u32(kGemvRows, c.n - n0), c.y, scratch);
  }

  // gemm_t / gemm_t_k64: N128 x M64 tiles. One body serves both: the panel layout already
  // streams K in 64-byte units, which is what the deep-K variant exists for elsewhere.
  static void gemm_t(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const W4a16Call c = w4a16_call(args);
    const uint32_t n0 = bx * kTileN, m0 = by * kTileM;
    if (n0 >= c.n || m0 >= c.m) return;
    block(c.x + static_cast<size_t>(m0) * c.k, min_u32(kTileM, c.m - m0),
          reinterpret_cast<const uint8_t*>(c.qweight), c.scales, c.n, c.k, n0,
          min_u32(kTileN, c.n - n0), c.y + static_cast<size_t>(m0) * c.n, scratch);
  }

  // Grouped GEMM: expert `by`'s rows in tile-height chunks over its 128-column tile; the tile's
  // panels stay cached between chunks, so tokens routed to one expert share one pass over DRAM.
  static void grouped(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const GroupedCall g = grouped_call(args);
    const uint32_t n0 = bx * kTileN;
    if (n0 >= g.n || by >= g.experts) return;
    const auto first = static_cast<uint32_t>(g.offsets[by]);
    const auto last = static_cast<uint32_t>(g.offsets[by + 1]);
    const auto* codes =
        reinterpret_cast<const uint8_t*>(g.qweight) + by * (static_cast<size_t>(g.n) * (g.k / 2));
    const uint16_t* scales = g.scales + by * (static_cast<size_t>(g.n) * (g.k / kGroup));
    for (uint32_t r = first; r < last; r += kTileM)
      block(g.x + static_cast<size_t>(r) * g.k, min_u32(kTileM, last - r), codes, scales, g.n, g.k,
            n0, min_u32(kTileN, g.n - n0), g.y + static_cast<size_t>(r) * g.n, scratch);
  }

  static SimdBodies bodies() {
    SimdBodies b{};
    b.gemv = &gemv;
    b.gemv_b8 = &gemv;
    b.gemm_t = &gemm_t;
    b.gemm_t_k64 = &gemm_t;
    b.grouped_gemm = &grouped;
    b.repack = &panel_repack;
    return b;
  }
};

}  // namespace
}  // namespace metrale::cpu
