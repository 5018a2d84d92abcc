// SPDX-License-Identifier: MIT OR Apache-2.0
// The W4A16 family written once over an instruction-set description `I`; each SIMD tier's TU
// (w4a16_avx2.cpp, w4a16_avx512.cpp, w4a16_avx512bf16.cpp) defines its `Isa` and instantiates
// W4a16Simd<Isa>. Everything is in an anonymous namespace, so each TU's instantiations are its
// own (see numeric.hpp for why that matters with per-TU -m flags). Use no std:: function here:
// an out-of-line std template instantiated under -mavx512f could be shared with baseline code.
//
// What `I` provides:
//   vf (f32 accumulator vector of kLanes), vo (operand vector covering kKPerVector values of k),
//   Elem (element of decoded weights and prepared activations: float, or bf16 bits),
//   kPreScaled (gemm_t's decoded weights carry their group scale, exact in f32; else the scale
//   is applied per group), kUnitK (k values per lane of an outer-product step: 1, or 2 for bf16
//   pairs), tile shapes kDotMR x kDotNR and kOuterMR x kOuterNV, and
//   half(bits): an f16 scale as f32 (F16C), zero, set1, fma, dot(acc, w, x), load/store of vo,
//   loadf/storef of vf, scale(vo, vf), hsum,
//   decode2(bytes, a, b): 2*kKPerVector codes as (q - 8) in natural k order,
//   prepare_x(bf16 src, count, dst): activations as Elem (may return src itself),
//   bcast_unit(p): one k unit of activations in every lane,
//   decode_t(base, idx, out, stride): a half group (64 codes) of kLanes weight rows, transposed:
//     out[u * stride + lane] = unit u of row idx[lane] / (k / 8).
#pragma once

#include "kernels.hpp"
#include "numeric.hpp"

namespace metrale::cpu {
namespace {

template <class I>
struct W4a16Simd {
  using vf = typename I::vf;
  using vo = typename I::vo;
  using E = typename I::Elem;
  static constexpr uint32_t V = I::kLanes;
  static constexpr uint32_t KV = I::kKPerVector;
  static constexpr uint32_t kHalf = kGroup / 2;

  // Chunk of K whose activations are prepared at once (fits the scratch layouts below).
  static constexpr uint32_t kGemvChunk = 4096;
  static constexpr uint32_t kTileChunk = 512;
  static constexpr uint32_t kDecodeRows = 16;  // weight rows decoded together in gemm_t
  static constexpr uint32_t kOuterN = I::kOuterNV * V;  // weight rows per k64 micro-tile

  static_assert(kGroup % (2 * KV) == 0);
  static_assert(kDecodeRows % I::kDotNR == 0 && kTileM % I::kDotMR == 0);
  static_assert(kTileN % kOuterN == 0 && kTileM % I::kOuterMR == 0);

  // ---------------------------------------------------------------- gemv, gemv_b8 (m <= 8)
  // MR activation rows times NR weight rows over `groups` groups, decoding the codes in
  // registers once for all MR rows. The codes feed few rows here, so the group scale is applied
  // once per group (not per decoded vector, as kPreScaled tiers do in the tile GEMM).
  template <uint32_t MR, uint32_t NR>
  static void gemv_micro(const E* const* xr, const uint8_t* const* wb, const uint16_t* const* sp,
                         uint32_t groups, float (&out)[MR][NR]) {
    vf tot[MR][NR];
#pragma GCC unroll 16
    for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (uint32_t j = 0; j < NR; ++j) tot[i][j] = I::zero();
    for (uint32_t g = 0; g < groups; ++g) {
      vf acc[MR][NR];
#pragma GCC unroll 16
      for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
        for (uint32_t j = 0; j < NR; ++j) acc[i][j] = I::zero();
#pragma GCC unroll 4
      for (uint32_t v = 0; v < kGroup; v += 2 * KV) {
        vo a[NR], b[NR];
#pragma GCC unroll 16
        for (uint32_t j = 0; j < NR; ++j) I::decode2(wb[j] + (g * kGroup + v) / 2, a[j], b[j]);
#pragma GCC unroll 16
        for (uint32_t i = 0; i < MR; ++i) {
          const vo xa = I::load(xr[i] + g * kGroup + v);
          const vo xb = I::load(xr[i] + g * kGroup + v + KV);
#pragma GCC unroll 16
          for (uint32_t j = 0; j < NR; ++j) {
            acc[i][j] = I::dot(acc[i][j], a[j], xa);
            acc[i][j] = I::dot(acc[i][j], b[j], xb);
          }
        }
      }
#pragma GCC unroll 16
      for (uint32_t j = 0; j < NR; ++j) {
        const vf s = I::set1(I::half(sp[j][g]));
#pragma GCC unroll 16
        for (uint32_t i = 0; i < MR; ++i) tot[i][j] = I::fma(acc[i][j], s, tot[i][j]);
      }
    }
#pragma GCC unroll 16
    for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (uint32_t j = 0; j < NR; ++j) out[i][j] = I::hsum(tot[i][j]);
  }

  template <uint32_t MR, uint32_t NR>
  static void gemv_rows(const E* const* xr, const W4a16Call& c, uint32_t row, uint32_t kc,
                        uint32_t groups, float* part, uint32_t col) {
    const auto* codes = reinterpret_cast<const uint8_t*>(c.qweight);
    const uint8_t* wb[NR];
    const uint16_t* sp[NR];
#pragma GCC unroll 16
    for (uint32_t j = 0; j < NR; ++j) {
      wb[j] = codes + static_cast<size_t>(row + j) * (c.k / 2) + kc / 2;
      sp[j] = c.scales + static_cast<size_t>(row + j) * (c.k / kGroup) + kc / kGroup;
    }
    float out[MR][NR];
    gemv_micro<MR, NR>(xr, wb, sp, groups, out);
#pragma GCC unroll 16
    for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (uint32_t j = 0; j < NR; ++j) part[i * kGemvRows + col + j] += out[i][j];
  }

  // Several weight rows at once when there are few activation rows, for independent chains.
  template <uint32_t MR>
  static void gemv_chunk(const E* const* xr, const W4a16Call& c, uint32_t n0, uint32_t nt,
                         uint32_t kc, uint32_t groups, float* part) {
    constexpr uint32_t NR = MR == 1 ? 4 : MR == 2 ? 2 : 1;
    uint32_t col = 0;
    for (; col + NR <= nt; col += NR) gemv_rows<MR, NR>(xr, c, n0 + col, kc, groups, part, col);
    for (; col < nt; ++col) gemv_rows<MR, 1>(xr, c, n0 + col, kc, groups, part, col);
  }

  static void gemv_block(const KernelArgs& args, uint32_t bx, unsigned char* scratch) {
    const W4a16Call c = w4a16_call(args);
    const uint32_t n0 = bx * kGemvRows;
    if (n0 >= c.n) return;
    const uint32_t nt = min_u32(kGemvRows, c.n - n0);
    float* part = scratch_at<float>(scratch, 0);
    E* xbuf = scratch_at<E>(scratch, sizeof(float) * kGemvMaxRows * kGemvRows);
    for (uint32_t i = 0; i < c.m * kGemvRows; ++i) part[i] = 0.0f;
    for (uint32_t kc = 0; kc < c.k; kc += kGemvChunk) {
      const uint32_t len = min_u32(kGemvChunk, c.k - kc);
      const E* xr[kGemvMaxRows];
      for (uint32_t i = 0; i < c.m; ++i)
        xr[i] = I::prepare_x(c.x + static_cast<size_t>(i) * c.k + kc, len,
                             xbuf + static_cast<size_t>(i) * kGemvChunk);
      const uint32_t groups = len / kGroup;
      switch (c.m) {
        case 1: gemv_chunk<1>(xr, c, n0, nt, kc, groups, part); break;
        case 2: gemv_chunk<2>(xr, c, n0, nt, kc, groups, part); break;
        case 3: gemv_chunk<3>(xr, c, n0, nt, kc, groups, part); break;
        case 4: gemv_chunk<4>(xr, c, n0, nt, kc, groups, part); break;
        case 5: gemv_chunk<5>(xr, c, n0, nt, kc, groups, part); break;
        case 6: gemv_chunk<6>(xr, c, n0, nt, kc, groups, part); break;
        case 7: gemv_chunk<7>(xr, c, n0, nt, kc, groups, part); break;
        default: gemv_chunk<8>(xr, c, n0, nt, kc, groups, part); break;
      }
    }
    for (uint32_t i = 0; i < c.m; ++i)
      for (uint32_t j = 0; j < nt; ++j)
        c.y[static_cast<size_t>(i) * c.n + n0 + j] = f32_to_bf16(part[i * kGemvRows + j]);
  }

  // ------------------------------------------------------ gemm_t: K along the vector lanes
  // Scratch: C f32 [kTileM][kTileN] | x Elem [kTileM][kTileChunk] | decoded weights Elem
  // [kDecodeRows][kTileChunk] | scales f32 [kDecodeRows][kTileChunk / kGroup] | zero row.
  static constexpr size_t kOffC = 0;
  static constexpr size_t kOffX = kOffC + sizeof(float) * kTileM * kTileN;
  static constexpr size_t kOffW = kOffX + sizeof(E) * kTileM * kTileChunk;
  static constexpr size_t kOffS = kOffW + sizeof(E) * kDecodeRows * kTileChunk;
  static constexpr size_t kOffZero = kOffS + sizeof(float) * kDecodeRows * (kTileChunk / kGroup);
  static constexpr size_t kOffEnd = kOffZero + sizeof(E) * kTileChunk;
  static_assert(kOffEnd <= kScratchBytes);

  template <uint32_t MR, uint32_t NR>
  static void dot_micro(const E* const* xr, const E* const* wr, const float* const* sr,
                        uint32_t groups, float (&out)[MR][NR]) {
    vf tot[MR][NR];
#pragma GCC unroll 16
    for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (uint32_t j = 0; j < NR; ++j) tot[i][j] = I::zero();
    for (uint32_t g = 0; g < groups; ++g) {
      [[maybe_unused]] vf acc[MR][NR];
      if constexpr (!I::kPreScaled)
#pragma GCC unroll 16
        for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
          for (uint32_t j = 0; j < NR; ++j) acc[i][j] = I::zero();
      for (uint32_t v = g * kGroup; v < (g + 1) * kGroup; v += KV) {
        vo w[NR];
#pragma GCC unroll 16
        for (uint32_t j = 0; j < NR; ++j) w[j] = I::load(wr[j] + v);
#pragma GCC unroll 16
        for (uint32_t i = 0; i < MR; ++i) {
          const vo xv = I::load(xr[i] + v);
#pragma GCC unroll 16
          for (uint32_t j = 0; j < NR; ++j) {
            if constexpr (I::kPreScaled)
              tot[i][j] = I::dot(tot[i][j], w[j], xv);
            else
              acc[i][j] = I::dot(acc[i][j], w[j], xv);
          }
        }
      }
      if constexpr (!I::kPreScaled)
#pragma GCC unroll 16
        for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
          for (uint32_t j = 0; j < NR; ++j)
            tot[i][j] = I::fma(acc[i][j], I::set1(sr[j][g]), tot[i][j]);
    }
#pragma GCC unroll 16
    for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (uint32_t j = 0; j < NR; ++j) out[i][j] = I::hsum(tot[i][j]);
  }

  // Decodes `len` codes of one weight row into dst (scaled when kPreScaled) and its group
  // scales into sdst; a row past the matrix decodes as zeros.
  static void decode_row(const W4a16Call& c, const uint32_t* qweight, const uint16_t* scales,
                         bool valid, size_t row, uint32_t kc, uint32_t len, E* dst, float* sdst) {
    if (!valid) {
      for (uint32_t t = 0; t < len; ++t) dst[t] = E{};
      for (uint32_t g = 0; g < len / kGroup; ++g) sdst[g] = 0.0f;
      return;
    }
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(qweight) + row * (c.k / 2) + kc / 2;
    const uint16_t* s = scales + row * (c.k / kGroup) + kc / kGroup;
    for (uint32_t g = 0; g < len / kGroup; ++g) {
      sdst[g] = I::half(s[g]);
      const vf sv = I::set1(sdst[g]);
      for (uint32_t v = g * kGroup; v < (g + 1) * kGroup; v += 2 * KV) {
        vo a, b;
        I::decode2(bytes + v / 2, a, b);
        if constexpr (I::kPreScaled) {
          a = I::scale(a, sv);
          b = I::scale(b, sv);
        }
        I::store(dst + v, a);
        I::store(dst + v + KV, b);
      }
    }
  }

  // Rows [0, mt) of x (stride k) times weight rows [n0, n0 + nt) of `qweight` into y (stride n).
  static void tile(const W4a16Call& c, const uint16_t* x, uint32_t mt, const uint32_t* qweight,
                   const uint16_t* scales, uint16_t* y, uint32_t n0, uint32_t nt,
                   unsigned char* scratch) {
    constexpr uint32_t MR = I::kDotMR, NR = I::kDotNR;
    float* cbuf = scratch_at<float>(scratch, kOffC);
    E* xbuf = scratch_at<E>(scratch, kOffX);
    E* wbuf = scratch_at<E>(scratch, kOffW);
    float* sbuf = scratch_at<float>(scratch, kOffS);
    E* zero = scratch_at<E>(scratch, kOffZero);
    for (uint32_t t = 0; t < kTileChunk; ++t) zero[t] = E{};
    for (uint32_t t = 0; t < kTileM * kTileN; ++t) cbuf[t] = 0.0f;
    const uint32_t mpad = (mt + MR - 1) / MR * MR;
    const E* xr[kTileM];
    const E* wr[kDecodeRows];
    const float* sr[kDecodeRows];
    for (uint32_t j = 0; j < kDecodeRows; ++j) {
      wr[j] = wbuf + static_cast<size_t>(j) * kTileChunk;
      sr[j] = sbuf + static_cast<size_t>(j) * (kTileChunk / kGroup);
    }
    for (uint32_t kc = 0; kc < c.k; kc += kTileChunk) {
      const uint32_t len = min_u32(kTileChunk, c.k - kc);
      const uint32_t groups = len / kGroup;
      for (uint32_t i = 0; i < mpad; ++i)
        xr[i] = i < mt ? I::prepare_x(x + static_cast<size_t>(i) * c.k + kc, len,
                                      xbuf + static_cast<size_t>(i) * kTileChunk)
                       : zero;
      for (uint32_t ns = 0; ns < nt; ns += kDecodeRows) {
        for (uint32_t j = 0; j < kDecodeRows; ++j)
          decode_row(c, qweight, scales, ns + j < nt, n0 + ns + j, kc, len,
                     wbuf + static_cast<size_t>(j) * kTileChunk,
                     sbuf + static_cast<size_t>(j) * (kTileChunk / kGroup));
        for (uint32_t mb = 0; mb < mpad; mb += MR) {
          for (uint32_t nb = 0; nb < kDecodeRows; nb += NR) {
            float out[MR][NR];
            dot_micro<MR, NR>(xr + mb, wr + nb, sr + nb, groups, out);
#pragma GCC unroll 16
            for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
              for (uint32_t j = 0; j < NR; ++j) cbuf[(mb + i) * kTileN + ns + nb + j] += out[i][j];
          }
        }
      }
    }
    for (uint32_t i = 0; i < mt; ++i)
      for (uint32_t j = 0; j < nt; ++j)
        y[static_cast<size_t>(i) * c.n + n0 + j] = f32_to_bf16(cbuf[i * kTileN + j]);
  }

  static void gemm_t_block(const KernelArgs& args, uint32_t bx, uint32_t by,
                           unsigned char* scratch) {
    const W4a16Call c = w4a16_call(args);
    const uint32_t n0 = bx * kTileN, m0 = by * kTileM;
    if (n0 >= c.n || m0 >= c.m) return;
    tile(c, c.x + static_cast<size_t>(m0) * c.k, min_u32(kTileM, c.m - m0), c.qweight, c.scales,
         c.y + static_cast<size_t>(m0) * c.n, n0, min_u32(kTileN, c.n - n0), scratch);
  }

  static void grouped_block(const KernelArgs& args, uint32_t bx, uint32_t by,
                            unsigned char* scratch) {
    const GroupedCall g = grouped_call(args);
    const uint32_t n0 = bx * kTileN;
    if (n0 >= g.n || by >= g.experts) return;
    const W4a16Call c{g.x, g.qweight, g.scales, g.y, 0, g.n, g.k};
    const auto first = static_cast<uint32_t>(g.offsets[by]);
    const auto last = static_cast<uint32_t>(g.offsets[by + 1]);
    const uint32_t* qweight = g.qweight + by * (static_cast<size_t>(g.n) * (g.k / 8));
    const uint16_t* scales = g.scales + by * (static_cast<size_t>(g.n) * (g.k / kGroup));
    // An expert's rows in tile-height chunks; its weight tile stays cached between chunks.
    for (uint32_t r = first; r < last; r += kTileM)
      tile(c, g.x + static_cast<size_t>(r) * g.k, min_u32(kTileM, last - r), qweight, scales,
           g.y + static_cast<size_t>(r) * g.n, n0, min_u32(kTileN, g.n - n0), scratch);
  }

  // ------------------------------------- gemm_t_k64: N along the lanes, K in 64-wide steps
  // Outer-product form: a half group of kOuterN weight rows is decoded transposed (k-major),
  // each activation unit is broadcast, and per step the half group's sums are scaled into the
  // C block. No horizontal sums, and the decoded half group (a few KiB) stays in L1 while the
  // tile's rows stream past it: the loop structure suited to deep K.
  // Scratch: C f32 [kTileM][kTileN] | x Elem [kTileM][kTileChunk] | decoded half group Elem
  // [kHalf][kOuterN] | scales f32 [kOuterN] | row offsets i32 [kOuterN] | zero row.
  static constexpr size_t kOffWt = kOffX + sizeof(E) * kTileM * kTileChunk;
  static constexpr size_t kOffSv = kOffWt + sizeof(E) * kHalf * kOuterN;
  static constexpr size_t kOffIdx = kOffSv + sizeof(float) * kOuterN;
  static constexpr size_t kOffZero64 = kOffIdx + sizeof(int32_t) * kOuterN;
  static_assert(kOffZero64 + sizeof(E) * kTileChunk <= kScratchBytes);
  static_assert(kOffSv % 64 == 0 && kOffIdx % 64 == 0 && kOffZero64 % 64 == 0);

  template <uint32_t MR>
  static void outer_micro(const E* const* xr, uint32_t h, const E* wt, const float* sv,
                          float* cblock) {
    constexpr uint32_t NV = I::kOuterNV;
    constexpr uint32_t stride = kOuterN * I::kUnitK;  // Elem per unit row of wt
    vf acc[MR][NV];
#pragma GCC unroll 16
    for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (uint32_t v = 0; v < NV; ++v) acc[i][v] = I::zero();
    for (uint32_t u = 0; u < kHalf / I::kUnitK; ++u) {
      vo w[NV];
#pragma GCC unroll 16
      for (uint32_t v = 0; v < NV; ++v) w[v] = I::load(wt + u * stride + v * V * I::kUnitK);
#pragma GCC unroll 16
      for (uint32_t i = 0; i < MR; ++i) {
        const vo b = I::bcast_unit(xr[i] + h + u * I::kUnitK);
#pragma GCC unroll 16
        for (uint32_t v = 0; v < NV; ++v) acc[i][v] = I::dot(acc[i][v], w[v], b);
      }
    }
#pragma GCC unroll 16
    for (uint32_t i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (uint32_t v = 0; v < NV; ++v) {
        float* cp = cblock + i * kTileN + v * V;
        I::storef(cp, I::fma(acc[i][v], I::loadf(sv + v * V), I::loadf(cp)));
      }
  }

  static void k64_block(const KernelArgs& args, uint32_t bx, uint32_t by,
                        unsigned char* scratch) {
    constexpr uint32_t MR = I::kOuterMR;
    const W4a16Call c = w4a16_call(args);
    const uint32_t n0 = bx * kTileN, m0 = by * kTileM;
    if (n0 >= c.n || m0 >= c.m) return;
    const uint32_t nt = min_u32(kTileN, c.n - n0), mt = min_u32(kTileM, c.m - m0);
    const uint16_t* x = c.x + static_cast<size_t>(m0) * c.k;
    float* cbuf = scratch_at<float>(scratch, kOffC);
    E* xbuf = scratch_at<E>(scratch, kOffX);
    E* wt = scratch_at<E>(scratch, kOffWt);
    float* sv = scratch_at<float>(scratch, kOffSv);
    int32_t* idx = scratch_at<int32_t>(scratch, kOffIdx);
    E* zero = scratch_at<E>(scratch, kOffZero64);
    for (uint32_t t = 0; t < kTileChunk; ++t) zero[t] = E{};
    for (uint32_t t = 0; t < kTileM * kTileN; ++t) cbuf[t] = 0.0f;
    const uint32_t mpad = (mt + MR - 1) / MR * MR;
    const uint32_t words_per_row = c.k / 8;
    const uint32_t groups = c.k / kGroup;
    const E* xr[kTileM];
    for (uint32_t kc = 0; kc < c.k; kc += kTileChunk) {
      const uint32_t len = min_u32(kTileChunk, c.k - kc);
      for (uint32_t i = 0; i < mpad; ++i)
        xr[i] = i < mt ? I::prepare_x(x + static_cast<size_t>(i) * c.k + kc, len,
                                      xbuf + static_cast<size_t>(i) * kTileChunk)
                       : zero;
      for (uint32_t ns = 0; ns < nt; ns += kOuterN) {
        const uint32_t valid = min_u32(kOuterN, nt - ns);
        // Rows past the matrix read the last valid row and get a zero scale.
        for (uint32_t lane = 0; lane < kOuterN; ++lane)
          idx[lane] = static_cast<int32_t>(min_u32(lane, valid - 1) * words_per_row);
        const uint32_t* rows = c.qweight + static_cast<size_t>(n0 + ns) * words_per_row;
        for (uint32_t h = 0; h < len; h += kHalf) {
          const uint32_t g = (kc + h) / kGroup;
          for (uint32_t lane = 0; lane < kOuterN; ++lane)
            sv[lane] = lane < valid
                           ? I::half(c.scales[static_cast<size_t>(n0 + ns + lane) * groups + g])
                           : 0.0f;
#pragma GCC unroll 16
          for (uint32_t v = 0; v < I::kOuterNV; ++v)
            I::decode_t(rows + (kc + h) / 8, idx + v * V, wt + v * V * I::kUnitK,
                        kOuterN * I::kUnitK);
          for (uint32_t mb = 0; mb < mpad; mb += MR)
            outer_micro<MR>(xr + mb, h, wt, sv, cbuf + mb * kTileN + ns);
        }
      }
    }
    uint16_t* y = c.y + static_cast<size_t>(m0) * c.n;
    for (uint32_t i = 0; i < mt; ++i)
      for (uint32_t j = 0; j < nt; ++j)
        y[static_cast<size_t>(i) * c.n + n0 + j] = f32_to_bf16(cbuf[i * kTileN + j]);
  }

  static W4a16Bodies bodies() {
    return {
        [](const KernelArgs& a, uint32_t bx, uint32_t, unsigned char* s) { gemv_block(a, bx, s); },
        [](const KernelArgs& a, uint32_t bx, uint32_t, unsigned char* s) { gemv_block(a, bx, s); },
        &gemm_t_block,
        &k64_block,
        &grouped_block,
    };
  }
};

}  // namespace
}  // namespace metrale::cpu
