// SPDX-License-Identifier: MIT OR Apache-2.0
// Every weight-quantized GEMM family on the 16-column panel layouts (panel_layout.hpp), written
// once over an instruction-set description `I` and a family (quant_calls.hpp): each SIMD tier's
// TU defines its Isas and installs PanelKernels<Isa, family> for every family. Everything is in
// an anonymous namespace, so each TU's instantiations are its own (see numeric.hpp for why that
// matters with per-TU -m flags). Use no std:: function here: an out-of-line std template
// instantiated under -mavx512f could be shared with baseline code (std::integer_sequence and
// std::conditional_t below are types only).
//
// The outer-product form: columns along the vector lanes, one 64-byte unit (16 columns x 8 k of
// 4-bit codes, or x 4 k of 8-bit codes) loaded per panel and decoded in registers, each decoded
// vector feeding every activation row of the micro-kernel against a broadcast activation.
// Per group, a lane accumulates x times the decoded code and the group ends with one FMA of the
// group scale into the block's running total:
// - bf16 activations: a decoder yields `q + offset` (the w4 decoders 16 + q, exact), so the
//   accumulator starts from -(z + offset) * sum(x) over the group (z: the zero point, 8 for
//   symmetric W4A16; sum(x) computed once per row and group) and ends the group at
//   sum x * (q - z). FP8 decoders yield e4m3(q) / value_scale (exact), scaled back with the scale.
//   Partial sums stay within a few times those of the direct form, inside the f32 budget.
// - int8 activations: the accumulator is int32 (exact), and the group ends with
//   tot += s * (acc - z * sum(xq)) in f32 (both products exact below 2^24, see docs/kernels.md).
// - E4M3 activations (fp8_gemm_a8*): each chunk of a row is widened to bf16 first (exact), then
//   runs as bf16 activations; the row scale multiplies the total, or scales per 128 columns
//   join each group's weight scale.
//
// Loop structure of a block (rows [0, mt) x columns [n0, n0 + nt), nt <= 128): K in chunks of
// kChunkK; per chunk, activation rows in blocks of up to I::kMaxRows are prepared (I::prepare)
// and their group sums computed, then every panel of the block is swept for those rows,
// I::panels(MR) panels per micro-kernel call. Accumulators (MR rows x NP panels) live in
// registers; the running totals of the block in scratch.
//
// What `I` provides (all static):
//   vf      f32 vector of kLanes lanes (scales, totals); kLanes divides 16, so a panel is
//           kPanel / kLanes vectors;
//   va      accumulator: f32 (vf) or int32 lanes; to_f32(va) and zero_acc();
//   vu      raw code vector: kLanes u32 lanes of a unit;
//   vw, vx  operands of dot: decoded weights and broadcast activations;
//   Src     activation element as given (bf16 bits or int8); Act, as prepared;
//   steps<C>() dot steps per unit for codes C (each step covers unit_k / steps k);
//   decode<C, S>(vu): the weight operand of step S of the unit;
//   decode_offset<C>(), value_scale<C>(): a decoded value is (code + offset) / value_scale;
//   kMaxRows activation rows per micro-kernel call (<= kTileM): blocks of kMaxRows rows while
//           that many are left, then up to kGemvMaxRows (or kMaxRows if less) at a time;
//   panels(mr) panels per micro-kernel call for mr rows (what the register file holds);
//   load_codes(p) / load_codes_tail(p, valid): kLanes lanes of a unit at p (only the first
//           `valid` lanes, 0..kLanes, read; the others zero);
//   bcast(p): the activations of one dot step at p broadcast as a dot operand;
//   dot(acc, w, x): acc + w * x per lane (summing the pair or quadruple of a lane);
//   set1, add, mul, fma(a, b, c) = a * b + c, fnmadd(a, b, c) = c - a * b, loadf / storef;
//   scales_f16 / scales_f32 / zeros (and _tail(p, valid)): kLanes group scales or zero points
//           at p as f32 (tail: first `valid` read, the others zero);
//   prepare<C>(src, len, dst): activations src[0, len) (len a multiple of 32) as the dot steps
//           of codes C read them, written to dst (room for kChunkK) or returned in place;
//   group_sum(p, len): the sum of `len` prepared activations at p, as f32.
#pragma once

#include <type_traits>
#include <utility>

#include "panel_layout.hpp"

namespace metrale::cpu {
namespace {

// E4M3 codes as bf16 bits, exactly: the code's low 7 bits become the top of an f32's exponent
// and mantissa, and a product with 2^120 restores E4M3's exponent bias (subnormals included);
// NaN codes become a quiet bf16 NaN. An Isa with a faster way provides widen_e4m3 instead.
// `len` is a multiple of 32. Written with vector types (16 codes at a time) because GCC at -O2
// left the scalar loop scalar: a block re-widens its row per chunk, and scalar widening cost a
// quarter of a block-FP8 decode (qwen3-32b, m = 1, Zen 4: 0.70 of the read bandwidth, 0.94 with
// bf16 activations). Each tier lowers the vectors to its own registers.
[[gnu::always_inline]] inline void e4m3_to_bf16(const uint8_t* src, uint32_t len, uint16_t* dst) {
  using u8x16 = uint8_t __attribute__((vector_size(16)));
  using u16x16 = uint16_t __attribute__((vector_size(32)));
  using u32x16 = uint32_t __attribute__((vector_size(64)));
  using f32x16 = float __attribute__((vector_size(64)));
  for (uint32_t t = 0; t < len; t += 16) {
    u8x16 bytes;
    __builtin_memcpy(&bytes, src + t, sizeof bytes);
    // Through u16: GCC 12 widens u8 to u32 in one step lane by lane, in two steps with vpmovzx.
    const u32x16 code = __builtin_convertvector(__builtin_convertvector(bytes, u16x16), u32x16);
    const u32x16 bits = (code & 0x7fu) << 20;
    f32x16 v;
    __builtin_memcpy(&v, &bits, sizeof v);
    v *= 0x1p120f;
    u32x16 wide;
    __builtin_memcpy(&wide, &v, sizeof wide);
    const u32x16 sign = (code & 0x80u) << 8;
    const u32x16 nan = (code & 0x7fu) == 0x7fu;  // all ones where the code is NaN (0x7f, 0xff)
    const u16x16 out = __builtin_convertvector((((wide >> 16) & ~nan) | (0x7fc0u & nan)) | sign, u16x16);
    __builtin_memcpy(dst + t, &out, sizeof out);
  }
}

template <class I, Family kFamily>
struct PanelKernels {
  static constexpr FamilyTraits kF = traits(kFamily);
  static constexpr Codes kCodes = kF.codes;
  using vf = typename I::vf;
  using va = typename I::va;
  using vu = typename I::vu;
  using Act = typename I::Act;
  using Src = typename I::Src;
  static constexpr bool kE4m3Act = kF.e4m3_act;
  using In = std::conditional_t<kE4m3Act, uint8_t, Src>;  // activations as the kernel takes them
  static constexpr uint32_t kLanes = I::kLanes;
  static constexpr uint32_t kVecs = kPanel / kLanes;  // vectors per panel
  static constexpr uint32_t kUnitK = 32 / kF.code_bits;
  static constexpr uint32_t kSteps = I::template steps<kCodes>();
  static constexpr uint32_t kStepK = kUnitK / kSteps;  // k per dot step
  static constexpr uint32_t kMaxRows = I::kMaxRows;
  // Row blocks: kMaxRows while that many are left, then at most kSmallRows at a time.
  static constexpr uint32_t kSmallRows = kMaxRows < kGemvMaxRows ? kMaxRows : kGemvMaxRows;
  // K per pass over a block's panels. W8A8's 8-bit tiles are twice the bytes per multiply-add:
  // half the chunk keeps what each 8-row block sweeps as close to the core (qwen3-32b prefill,
  // 2 threads: 0.64-0.66 -> 0.68 of the int8 dot peak; W4A8 measured no gain from it).
  static constexpr uint32_t kChunkK = kF.int8_act && kF.code_bits == 8 ? 1024 : 2048;
  static constexpr uint32_t kMaxChunkGroups = kChunkK / (kF.fixed_group ? kF.fixed_group : 32);
  static constexpr uint32_t kBlockCols = kTileN;     // widest block: 128 columns, 8 panels
  static constexpr uint32_t kStartLines = 8;         // lines of each panel prefetched up front
  static constexpr uint32_t kGroupsAhead = 4;        // f32 scales and zero points fetched ahead
  static constexpr bool kIntAcc = kF.int8_act;
  static constexpr bool kSums = kF.zeros || kF.sym_zero != 0;  // group sums of the activations
  // The group sums as the accumulators start from them: -(8 + offset) * sum for symmetric W4A16.
  static constexpr float kSumFactor =
      kF.sym_zero ? -(static_cast<float>(kF.sym_zero) + I::template decode_offset<kCodes>()) : 1.0f;
  static_assert(kPanel % kLanes == 0 && kUnitK % kSteps == 0);
  static_assert(kMaxRows >= 1 && kMaxRows <= kTileM && kGemvRows <= kBlockCols);

  // Scratch: totals f32 [kTileM][kBlockCols] | group sums f32 [kMaxRows][kMaxChunkGroups] |
  // prepared activations Act [kMaxRows][kXStride]. The rows of prepared activations are one
  // cache line longer than a chunk so that the rows' broadcasts (same k, kMaxRows rows) fall in
  // different L1 sets.
  static constexpr uint32_t kXStride = kChunkK + 64 / sizeof(Act);
  static constexpr size_t kOffTot = 0;
  static constexpr size_t kOffCorr = kOffTot + sizeof(float) * kTileM * kBlockCols;
  static constexpr size_t kOffX = (kOffCorr + sizeof(float) * kMaxRows * kMaxChunkGroups + 63) / 64 * 64;
  // E4M3 activations widened to bf16: [kMaxRows][kChunkK], after the prepared activations.
  static constexpr size_t kOffWide = (kOffX + sizeof(Act) * kMaxRows * kXStride + 63) / 64 * 64;
  static_assert(kOffWide + (kE4m3Act ? sizeof(uint16_t) * kMaxRows * kChunkK : 0) <= kScratchBytes);

  // One unit of MR rows x NV vectors: kSteps decode + broadcast + dot steps.
  template <uint32_t MR, uint32_t NV, uint32_t... S>
  [[gnu::always_inline]] static inline void unit_steps(va (&acc)[MR][NV], const vu (&unit)[NV],
                                                       const Act* const* x, uint32_t kx,
                                                       std::integer_sequence<uint32_t, S...>) {
    (
        [&] {
          typename I::vw w[NV];
#pragma GCC unroll 16
          for (uint32_t v = 0; v < NV; ++v) w[v] = I::template decode<kCodes, S>(unit[v]);
#pragma GCC unroll 16
          for (uint32_t i = 0; i < MR; ++i) {
            const typename I::vx xb = I::bcast(x[i] + kx + S * kStepK);
#pragma GCC unroll 16
            for (uint32_t v = 0; v < NV; ++v) acc[i][v] = I::dot(acc[i][v], w[v], xb);
          }
        }(),
        ...);
  }

  // Group scales (or zero points) of vector h of a panel at p, full or under the tail mask.
  template <bool kTail>
  [[gnu::always_inline]] static inline vf scales(const uint8_t* p, uint32_t valid) {
    vf s;
    if constexpr (kF.scale_bytes == 2)
      s = kTail ? I::scales_f16_tail(reinterpret_cast<const uint16_t*>(p), valid)
                : I::scales_f16(reinterpret_cast<const uint16_t*>(p));
    else
      s = kTail ? I::scales_f32_tail(reinterpret_cast<const float*>(p), valid)
                : I::scales_f32(reinterpret_cast<const float*>(p));
    constexpr float kValueScale = I::template value_scale<kCodes>();
    if constexpr (kValueScale != 1.0f) s = I::mul(s, I::set1(kValueScale));
    return s;
  }
  template <bool kTail>
  [[gnu::always_inline]] static inline vf zeros(const uint8_t* p, uint32_t valid) {
    return kTail ? I::zeros_tail(p, valid) : I::zeros(p);
  }

  // Where a micro-kernel call's panels are: codes, scales and zero points from group g0 on, and
  // the lanes each vector of a panel holds.
  template <uint32_t NP, bool kTail>
  struct Streams {
    const uint8_t* codes[NP];
    const uint8_t* scales[NP];
    const uint8_t* zeros[NP];
    const uint8_t* codes_end[NP];
    ptrdiff_t beyond[NP];
    uint32_t width, units;
    size_t unit_bytes;
    uint32_t valid[kVecs];
    Streams(const PanelRef* panels, uint32_t g0, uint32_t group_units) {
      units = kF.fixed_group ? kF.fixed_group / kUnitK : group_units;
      width = kTail ? panels[0].width : kPanel;
      unit_bytes = size_t{width} * 4;
#pragma GCC unroll 4
      for (uint32_t h = 0; h < kVecs; ++h) {
        const uint32_t first = h * kLanes;
        valid[h] = width <= first ? 0 : min_u32(kLanes, width - first);
      }
#pragma GCC unroll 8
      for (uint32_t p = 0; p < NP; ++p) {
        codes[p] = panels[p].codes + static_cast<size_t>(g0) * units * unit_bytes;
        codes_end[p] = panels[p].codes_end;
        beyond[p] = panels[p].beyond;
        scales[p] = kF.scale_bytes ? panels[p].scales + static_cast<size_t>(g0) * width * kF.scale_bytes : nullptr;
        zeros[p] = kF.zeros ? panels[p].zeros + static_cast<size_t>(g0) * width : nullptr;
      }
    }
    // Vector h of panel p's group g: where its scales (or zero points, of one byte) start.
    size_t at(uint32_t g, uint32_t h) const { return static_cast<size_t>(g) * width + h * kLanes; }
  };

  // The accumulators at the start of group g (see the header comment): 0 for int8 activations
  // and FP8, else -(z + offset) * sum(x) per row (corr) and column.
  template <uint32_t MR, uint32_t NV, bool kTail>
  [[gnu::always_inline]] static inline void group_start(va (&acc)[MR][NV], const Streams<NV / kVecs, kTail>& st,
                                                        const float* corr, uint32_t g) {
    if constexpr (kIntAcc || !kSums) {
#pragma GCC unroll 16
      for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
        for (uint32_t v = 0; v < NV; ++v) acc[i][v] = I::zero_acc();
    } else if constexpr (!kF.zeros) {  // symmetric: the start is -(8 + offset) * sum, in corr
#pragma GCC unroll 16
      for (uint32_t i = 0; i < MR; ++i) {
        const vf c = I::set1(corr[i * kMaxChunkGroups + g]);
#pragma GCC unroll 16
        for (uint32_t v = 0; v < NV; ++v) acc[i][v] = c;
      }
    } else {
      vf zf[NV];
#pragma GCC unroll 16
      for (uint32_t v = 0; v < NV; ++v) {
        const uint32_t h = v % kVecs;
        zf[v] = zeros<kTail>(st.zeros[v / kVecs] + st.at(g, h), st.valid[h]);
        if constexpr (I::template decode_offset<kCodes>() != 0.0f)
          zf[v] = I::add(zf[v], I::set1(I::template decode_offset<kCodes>()));
      }
#pragma GCC unroll 16
      for (uint32_t i = 0; i < MR; ++i) {
        const vf c = I::set1(-corr[i * kMaxChunkGroups + g]);
#pragma GCC unroll 16
        for (uint32_t v = 0; v < NV; ++v) acc[i][v] = I::mul(zf[v], c);
      }
    }
  }

  // The end of group g: its scale applied into the running totals (tot rows stride kBlockCols);
  // for int8 activations after the exact integer correction acc - z * sum(xq).
  template <uint32_t MR, uint32_t NV, bool kTail>
  [[gnu::always_inline]] static inline void group_end(const va (&acc)[MR][NV], const Streams<NV / kVecs, kTail>& st,
                                                      const float* corr, uint32_t g, float* tot) {
    if constexpr (kF.scale_bytes == 0) {  // bf16 / f16 weights: the group's sums join the totals
#pragma GCC unroll 16
      for (uint32_t v = 0; v < NV; ++v)
#pragma GCC unroll 16
        for (uint32_t i = 0; i < MR; ++i) {
          float* t = tot + i * kBlockCols + v * kLanes;
          I::storef(t, I::add(acc[i][v], I::loadf(t)));
        }
      return;
    }
#pragma GCC unroll 16
    for (uint32_t v = 0; v < NV; ++v) {
      const uint32_t p = v / kVecs, h = v % kVecs;
      const vf s = scales<kTail>(st.scales[p] + st.at(g, h) * kF.scale_bytes, st.valid[h]);
      if constexpr (kIntAcc) {  // exact: acc and z * sum(xq) are integers below 2^24
        const vf z = zeros<kTail>(st.zeros[p] + st.at(g, h), st.valid[h]);
#pragma GCC unroll 16
        for (uint32_t i = 0; i < MR; ++i) {
          float* t = tot + i * kBlockCols + v * kLanes;
          const vf d = I::fnmadd(z, I::set1(corr[i * kMaxChunkGroups + g]), I::to_f32(acc[i][v]));
          I::storef(t, I::fma(d, s, I::loadf(t)));
        }
      } else if constexpr (kF.act_groups) {  // corr holds the rows' activation scales of the chunk
#pragma GCC unroll 16
        for (uint32_t i = 0; i < MR; ++i) {
          float* t = tot + i * kBlockCols + v * kLanes;
          I::storef(t, I::fma(acc[i][v], I::mul(s, I::set1(corr[i * kMaxChunkGroups + g])), I::loadf(t)));
        }
      } else {
#pragma GCC unroll 16
        for (uint32_t i = 0; i < MR; ++i) {
          float* t = tot + i * kBlockCols + v * kLanes;
          I::storef(t, I::fma(acc[i][v], s, I::loadf(t)));
        }
      }
    }
  }

  // MR activation rows times NP panels over `groups` groups starting at group g0 of the chunk.
  // Full panels (kTail false) are 16 wide; a tail panel (NP = 1) has `width` < 16 lanes, its
  // codes, scales and zeros read under a mask. x rows are the chunk's prepared activations; tot
  // rows have stride kBlockCols (a tail panel's totals are written in full: the block keeps all
  // 16 columns of each panel); corr rows (the group sums) stride kMaxChunkGroups.
  template <uint32_t MR, uint32_t NP, bool kTail>
  static void micro(const Act* const* x, const float* corr, const PanelRef* panels, uint32_t g0,
                    uint32_t groups, uint32_t group_units, float* tot) {
    constexpr uint32_t NV = NP * kVecs;
    const Streams<NP, kTail> st(panels, g0, group_units);
    for (uint32_t g = 0; g < groups; ++g) {
      // f32 scales and zero points are streams of their own, a line every few groups: fetched
      // ahead like the codes (the f16 scales of W4A16 ride along without help).
      if constexpr (kF.scale_bytes == 4)
#pragma GCC unroll 8
        for (uint32_t p = 0; p < NP; ++p) {
          __builtin_prefetch(st.scales[p] + st.at(g + kGroupsAhead, 0) * 4, 0, 2);
          if constexpr (kF.zeros) __builtin_prefetch(st.zeros[p] + st.at(g + kGroupsAhead, 0), 0, 2);
        }
      va acc[MR][NV];
      group_start<MR, NV, kTail>(acc, st, corr, g);
      for (uint32_t j = 0; j < st.units; ++j) {
        vu unit[NV];
#pragma GCC unroll 8
        for (uint32_t p = 0; p < NP; ++p) {
          const uint8_t* u = st.codes[p] + (static_cast<size_t>(g) * st.units + j) * st.unit_bytes;
          // Panels stream side by side; help the prefetcher see each stream early: 2 KiB ahead
          // into L2 (measured on Zen 4: +12% on one thread against 512 B ahead into L1).
          const uint8_t* ahead = u + 32 * st.unit_bytes;
          __builtin_prefetch(ahead < st.codes_end[p] ? ahead : ahead + st.beyond[p], 0, 2);
#pragma GCC unroll 4
          for (uint32_t h = 0; h < kVecs; ++h)
            unit[p * kVecs + h] = kTail ? I::load_codes_tail(u + h * kLanes * 4, st.valid[h])
                                        : I::load_codes(u + h * kLanes * 4);
        }
        unit_steps<MR, NV>(acc, unit, x, (g * st.units + j) * kUnitK, std::make_integer_sequence<uint32_t, kSteps>{});
      }
      group_end<MR, NV, kTail>(acc, st, corr, g, tot);
    }
  }

  // Every panel of a block for MR rows: I::panels(MR) panels per call, narrower calls for the
  // rest, then a masked call for a partial last panel.
  template <uint32_t MR>
  static void rows(const Act* const* x, const float* corr, const PanelRef* panels, uint32_t count,
                   uint32_t g0, uint32_t groups, uint32_t units, float* tot) {
    constexpr uint32_t kWide = I::panels(MR);
    static_assert(kWide >= 1);
    uint32_t p = 0;
    const uint32_t full = panels[count - 1].width == kPanel ? count : count - 1;
    for (; p + kWide <= full; p += kWide)
      micro<MR, kWide, false>(x, corr, panels + p, g0, groups, units, tot + p * kPanel);
    if constexpr (kWide > 4)
      for (; p + 4 <= full; p += 4) micro<MR, 4, false>(x, corr, panels + p, g0, groups, units, tot + p * kPanel);
    if constexpr (kWide > 2)
      for (; p + 2 <= full; p += 2) micro<MR, 2, false>(x, corr, panels + p, g0, groups, units, tot + p * kPanel);
    if constexpr (kWide > 1)
      for (; p < full; ++p) micro<MR, 1, false>(x, corr, panels + p, g0, groups, units, tot + p * kPanel);
    if (p < count) micro<MR, 1, true>(x, corr, panels + p, g0, groups, units, tot + p * kPanel);
  }

  template <uint32_t MR>
  static void rows_for(uint32_t mr, const Act* const* x, const float* corr, const PanelRef* panels,
                       uint32_t count, uint32_t g0, uint32_t groups, uint32_t units, float* tot) {
    if constexpr (MR > 1)
      if (mr < MR) return rows_for<MR - 1>(mr, x, corr, panels, count, g0, groups, units, tot);
    rows<MR>(x, corr, panels, count, g0, groups, units, tot);
  }

  // Part `part` of `parts` of the units [first, first + count) of every panel, into L2. A block
  // of many rows sweeps each chunk's panels once per row block: the first sweep would wait on
  // memory while the others hit the cache, so the later sweeps of a chunk fetch the next one.
  static void prefetch_part(const PanelRef* panels, uint32_t panel_count, uint32_t first, uint32_t count,
                            uint32_t part, uint32_t parts) {
    for (uint32_t p = 0; p < panel_count; ++p) {
      const size_t unit_bytes = size_t{panels[p].width} * 4, bytes = count * unit_bytes;
      const uint8_t* base = panels[p].codes + first * unit_bytes;
      for (size_t line = bytes * part / parts / 64; line < bytes * (part + 1) / parts / 64; ++line)
        __builtin_prefetch(base + line * 64, 0, 2);
    }
  }

  // Rows [0, mt) (mt <= kTileM) of x (row stride k; per-row scales xscale, or per row and 128
  // columns, or null) times columns [n0, n0 + nt) (n0 a multiple of 16, nt <= kBlockCols) of one
  // panel-layout matrix, into y (row stride n).
  static void block(const In* x, const float* xscale, uint32_t mt, const Weights& w, uint32_t n, uint32_t k,
                    uint32_t group_arg, uint32_t n0, uint32_t nt, uint16_t* y, unsigned char* scratch, bool chain = false,
                    const uint8_t* after_matrix = nullptr) {
    float* tot = scratch_at<float>(scratch, kOffTot);
    float* corr = scratch_at<float>(scratch, kOffCorr);
    Act* xbuf = scratch_at<Act>(scratch, kOffX);
    [[maybe_unused]] uint16_t* wide = scratch_at<uint16_t>(scratch, kOffWide);
    const uint32_t group = kF.fixed_group ? kF.fixed_group : group_arg;
    const uint32_t count = (nt + kPanel - 1) / kPanel;
    for (uint32_t i = 0; i < mt; ++i) __builtin_memset(tot + i * kBlockCols, 0, sizeof(float) * count * kPanel);
    PanelRef panels[kBlockCols / kPanel];
    for (uint32_t p = 0; p < count; ++p) {
      panels[p] = panel_ref(kF, w, n, k, group, n0 / kPanel + p);
      // A block's panels are short streams (a MoE expert tile: a few KiB each): start them all
      // at once rather than wait for the hardware prefetcher to notice each in turn.
      for (uint32_t line = 0; line < kStartLines; ++line) __builtin_prefetch(panels[p].codes + line * 64, 0, 3);
    }
    // A chained decode block (one micro-kernel call per chunk): past their ends, its streams
    // prefetch the panels that follow it in its matrix, or at the matrix's end those at
    // `after_matrix` (the next expert with rows), so the caller's next block does not start
    // cold (a grouped decode step, Intel Xeon EMR class: 5-13% per step, docs/perf.md).
    const uint8_t* next = n0 + nt < n ? panels[count - 1].codes_end : after_matrix;
    if (chain && next && mt <= kMaxRows && count <= I::panels(mt) && nt == count * kPanel) {
      const size_t panel_bytes = size_t{kPanel} * k * kF.code_bits / 8;
      for (uint32_t p = 0; p < count; ++p) panels[p].beyond = next + p * panel_bytes - panels[p].codes_end;
    }
    const uint32_t groups = k / group, chunk_groups = kChunkK / group, units = group / kUnitK;
    const uint32_t row_blocks = (mt + kMaxRows - 1) / kMaxRows;
    for (uint32_t g0 = 0; g0 < groups; g0 += chunk_groups) {
      const uint32_t gn = min_u32(chunk_groups, groups - g0);
      for (uint32_t r0 = 0, mr = 0; r0 < mt; r0 += mr) {
        // Only whole row blocks after the first prefetch (a short block's small-row steps do not).
        if (r0 >= kMaxRows && g0 + chunk_groups < groups)
          prefetch_part(panels, count, (g0 + chunk_groups) * units, min_u32(chunk_groups, groups - g0 - chunk_groups) * units,
                        r0 / kMaxRows - 1, row_blocks - 1);
        mr = mt - r0 >= kMaxRows ? kMaxRows : min_u32(kSmallRows, mt - r0);
        const Act* xr[kMaxRows];
        for (uint32_t i = 0; i < mr; ++i) {
          const In* row = x + static_cast<size_t>(r0 + i) * k + g0 * group;
          const Src* src;
          if constexpr (kE4m3Act) {
            if constexpr (requires { I::widen_e4m3(row, gn * group, wide); })
              I::widen_e4m3(row, gn * group, wide + static_cast<size_t>(i) * kChunkK);
            else
              e4m3_to_bf16(row, gn * group, wide + static_cast<size_t>(i) * kChunkK);
            src = wide + static_cast<size_t>(i) * kChunkK;
          } else {
            src = row;
          }
          xr[i] = I::template prepare<kCodes>(src, gn * group, xbuf + static_cast<size_t>(i) * kXStride);
          if constexpr (kF.act_groups)
            for (uint32_t g = 0; g < gn; ++g) corr[i * kMaxChunkGroups + g] = xscale[static_cast<size_t>(r0 + i) * groups + g0 + g];
          if constexpr (kSums)
            for (uint32_t g = 0; g < gn; ++g)
              corr[i * kMaxChunkGroups + g] = kSumFactor * I::group_sum(xr[i] + g * group, group);
        }
        if (mr == kMaxRows)
          rows<kMaxRows>(xr, corr, panels, count, g0, gn, units, tot + r0 * kBlockCols);
        else
          rows_for<kSmallRows>(mr, xr, corr, panels, count, g0, gn, units, tot + r0 * kBlockCols);
      }
    }
    const bool row_scales = xscale && !kF.act_groups;
    for (uint32_t i = 0; i < mt; ++i) {
      const float row_scale = row_scales ? xscale[i] : 1.0f;
      for (uint32_t j = 0; j < nt; ++j) {
        const float v = tot[i * kBlockCols + j];
        y[static_cast<size_t>(i) * n + n0 + j] = f32_to_bf16(row_scales ? v * row_scale : v);
      }
    }
  }

  // ---------------------------------------------------------------------------- the bodies
  // gemv (and w4a16_gemv_b8): N64 blocks, all m (<= 8) rows.
  static void gemv(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char* scratch) {
    const DenseCall c = dense_call(args, kF);
    const uint32_t n0 = bx * kGemvRows;
    if (n0 >= c.n) return;
    block(static_cast<const In*>(c.x), c.xscale, min_u32(c.m, kGemvMaxRows), c.w, c.n, c.k, c.group, n0,
          min_u32(kGemvRows, c.n - n0), c.y, scratch);
  }

  // gemm (and w4a16_gemm_t / _k64): N128 x M64 tiles. One body serves both W4A16 tiles: the
  // panel layout already streams K in 64-byte units, which is what the deep-K variant is for.
  static void gemm(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const DenseCall c = dense_call(args, kF);
    const uint32_t n0 = bx * kTileN, m0 = by * kTileM;
    if (n0 >= c.n || m0 >= c.m) return;
    block(static_cast<const In*>(c.x) + static_cast<size_t>(m0) * c.k, c.xscale ? c.xscale + m0 * act_row_scales(kF, c.k) : nullptr,
          min_u32(kTileM, c.m - m0), c.w, c.n, c.k, c.group, n0, min_u32(kTileN, c.n - n0),
          c.y + static_cast<size_t>(m0) * c.n, scratch);
  }

  // Rows [first, last) of one expert's matrix `e` on the columns of block bx (`cols` wide), in
  // tile-height chunks; the tile's panels stay cached between chunks, so tokens routed to one
  // expert share one pass over memory.
  static void expert_rows(const GroupedQCall& g, uint32_t e, uint32_t first, uint32_t last, uint32_t n0,
                          uint32_t cols, unsigned char* scratch, const uint8_t* after = nullptr) {
    const Weights w = matrix_at(kF, g.w, e, g.n, g.k, g.group);
    for (uint32_t r = first; r < last; r += kTileM)
      block(static_cast<const In*>(g.x) + static_cast<size_t>(r) * g.k, g.xscale ? g.xscale + r * act_row_scales(kF, g.k) : nullptr,
            min_u32(kTileM, last - r), w, g.n, g.k, g.group, n0, min_u32(cols, g.n - n0),
            g.y + static_cast<size_t>(r) * g.n, scratch, last - first <= kGemvMaxRows, after);
  }

  // Grouped GEMM: expert `by`'s rows over its 128-column tile. An expert with a few rows (a
  // decode step) runs the tile as two 64-column halves, as the dense GEMV does: four panel
  // streams at a time instead of eight keep the prefetches ahead of a short stream (K of 768 or
  // 2048); measured on Zen 4, one thread, qwen3-30b-a3b m = 1: 0.62 -> 0.75 of the read
  // bandwidth. Each column's sum is the same either way.
  static void grouped(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const GroupedQCall g = grouped_qcall(args, kF);
    const uint32_t n0 = bx * kTileN;
    if (n0 >= g.n || by >= g.experts) return;
    const auto first = static_cast<uint32_t>(g.offsets[by]), last = static_cast<uint32_t>(g.offsets[by + 1]);
    if (last - first <= kGemvMaxRows) {
      const uint8_t* after = nullptr;
      if (n0 + kTileN >= g.n)
        for (uint32_t e = by + 1; e < g.experts && !after; ++e)
          if (g.offsets[e + 1] > g.offsets[e]) after = matrix_at(kF, g.w, e, g.n, g.k, g.group).codes;
      for (uint32_t c = n0; c < n0 + kTileN && c < g.n; c += kGemvRows)
        expert_rows(g, by, first, last, c, kGemvRows, scratch, after);
      return;
    }
    expert_rows(g, by, first, last, n0, kTileN, scratch);
  }

  // fp8_grouped_gemv: block (bx, by) serves 64 columns of expert active[1 + by].
  static void grouped_gemv(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const ActiveCall a = active_call(args);
    const uint32_t n0 = bx * kGemvRows;
    if (n0 >= a.g.n || a.active[0] < 0 || by >= static_cast<uint32_t>(a.active[0])) return;
    const auto e = static_cast<uint32_t>(a.active[1 + by]);
    const uint8_t* after = n0 + kGemvRows < a.g.n || by + 1 >= static_cast<uint32_t>(a.active[0])
                               ? nullptr
                               : matrix_at(kF, a.g.w, static_cast<uint32_t>(a.active[2 + by]), a.g.n, a.g.k, a.g.group).codes;
    expert_rows(a.g, e, static_cast<uint32_t>(a.g.offsets[e]), static_cast<uint32_t>(a.g.offsets[e + 1]), n0,
                kGemvRows, scratch, after);
  }

  // The family's kernels in a tier's table.
  static void install(SimdBodies& b) {
    switch (kFamily) {
      case Family::w4a16:
        b[Simd::w4a16_gemv] = b[Simd::w4a16_gemv_b8] = &gemv;
        b[Simd::w4a16_gemm_t] = b[Simd::w4a16_gemm_t_k64] = &gemm;
        b[Simd::w4a16_grouped_gemm] = &grouped;
        b[Simd::w4a16_repack] = &panel_repack<kFamily>;
        break;
      case Family::w4a16_zp: set(b, Simd::w4a16_zp_gemv); break;
      case Family::w8a16: set(b, Simd::w8a16_gemv); break;
      case Family::fp8:
        b[Simd::fp8_gemv] = &gemv;
        b[Simd::fp8_gemm] = &gemm;
        b[Simd::fp8_grouped_gemm] = &grouped;
        b[Simd::fp8_grouped_gemv] = &grouped_gemv;
        b[Simd::fp8_repack] = &panel_repack<kFamily>;
        break;
      case Family::fp8_a8:
        b[Simd::fp8_gemv_a8] = &gemv;
        b[Simd::fp8_gemm_a8] = &gemm;
        b[Simd::fp8_grouped_gemm_a8] = &grouped;
        break;
      case Family::fp8_a8_group128:
        b[Simd::fp8_gemv_a8_group128] = &gemv;
        b[Simd::fp8_gemm_a8_group128] = &gemm;
        b[Simd::fp8_grouped_gemm_a8_group128] = &grouped;
        break;
      case Family::w4afp8:
        b[Simd::w4afp8_gemm] = &gemm;
        b[Simd::w4afp8_grouped_gemm] = &grouped;
        b[Simd::w4afp8_repack] = &panel_repack<kFamily>;
        break;
      case Family::w4a8: set(b, Simd::w4a8_gemv); break;
      case Family::w8a8: set(b, Simd::w8a8_gemv); break;
      case Family::bf16: set(b, Simd::bf16_gemv); break;
      case Family::f16: set(b, Simd::f16_gemv); break;
    }
  }
  // The four slots gemv, gemm, grouped_gemm, repack in that order from `first`.
  static void set(SimdBodies& b, Simd first) {
    const auto at = [&](int offset) { return static_cast<Simd>(static_cast<int>(first) + offset); };
    b[at(0)] = &gemv;
    b[at(1)] = &gemm;
    b[at(2)] = &grouped;
    b[at(3)] = &panel_repack<kFamily>;
  }
};

}  // namespace
}  // namespace metrale::cpu
