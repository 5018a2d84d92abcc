// SPDX-License-Identifier: MIT OR Apache-2.0
// deltanet/delta_rule_chunked in vector registers, for any tier's lane type (Ops: deltanet_avx2.hpp,
// deltanet_avx512.hpp). The baseline's WY form (deltanet_chunked.cpp) and its formulas, chunk by
// chunk of 64 tokens, S [k_dim][v_dim] f32 in its slot throughout; only the order of the f32 sums
// differs. Every product of the chunk is one register-blocked GEMM (`gemm` below: kRows rows x
// kVecs vectors of f32 accumulators, one broadcast of A and kVecs loads of B per inner step):
//   KK = K Kt, QK = Q Kt                       [n x k_dim] . [k_dim x 64] (Kt: K transposed at load)
//   A, P: KK and QK times e^(G_i - G_j) (vector exp), masked lower / lower-incl
//   T by forward substitution over whole rows (row i = A_i + sum_{m<i} A[i][m] T_m)
//   Mu = (I + T) diag(beta), Mw = (I + T) diag(beta e^G): U = Mu V, W = Mw K   [n x n] . [n x dim]
//   V' = U - W S                                [n x k_dim] . [k_dim x v_dim]
//   O = (Q e^G) S + P V'
//   S <- e^(G_last) S + (Kt e^(G_last - G)) V'  [k_dim x n] . [n x v_dim]
// Each block (run, head) runs on one thread in this fixed order: the bits depend on the shapes
// only, never on the thread count or the grid split. k_dim and v_dim must be multiples of the
// lane count (the caller falls back otherwise). Internal linkage on purpose (see numeric.hpp):
// included by each SIMD tier's TU, compiled with its flags.
#pragma once

#include "deltanet_calls.hpp"
#include "kernels.hpp"
#include "numeric.hpp"

#include <xmmintrin.h>

#include <cmath>

namespace metrale::cpu {
namespace {

// Subnormal f32 flushed to zero, as inputs (DAZ) and as results (FTZ), for the guard's lifetime,
// then the caller's MXCSR back. The chunk's decays e^(G_i - G_j), e^G and e^(G_last) reach far
// below 2^-126 in heads that forget fast (g of -2 a token: e^-128 over one chunk), and every FMA
// on a subnormal operand or result takes a microcode assist (~100 cycles on Intel cores): the
// body ran at a third of its speed. A value under 2^-126 lies 2^-118 below the budget's
// 2^-8 max|out|.
struct FlushSubnormals {
  unsigned saved;
  FlushSubnormals() : saved(_mm_getcsr()) { _mm_setcsr(saved | 0x8040u); }
  ~FlushSubnormals() { _mm_setcsr(saved); }
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;
};

template <class Ops>
struct DeltaChunkedSimd {
  using vf = typename Ops::vf;
  static constexpr uint32_t kL = Ops::kLanes;
  static constexpr uint32_t kC = kDeltaChunk;  // 64 tokens: the [64][64] matrices' row stride
  static constexpr uint32_t kCV = kC / kL;     // vectors per row of a [64][64] matrix

  // The chunk's matrices at the largest dims (256) fit a pool slot's scratch.
  static_assert((4 * size_t{kC} * kMaxDeltaDim + 2 * size_t{kC} * kMaxDeltaDim + 4 * size_t{kC} * kC + 4 * kC) * 4 <=
                kScratchBytes);

  static bool fits(const DeltaCall& c) { return c.k_dim % kL == 0 && c.v_dim % kL == 0; }

  // One chunk of one head in the block's scratch (all f32, rows [0, n) in use).
  struct Chunk {
    uint32_t n, kd, vd;
    float *q, *k, *kt, *w;  // [64][kd], [64][kd], [kd][64], [64][kd]
    float *v, *u;           // [64][vd]: v (then O), U (then V')
    float *a, *p, *mu, *mw; // [64][64]: KK then A then T; QK then P; (I + T) diag(beta); diag(beta e^G)
    float *gsum, *beta, *bg, *ek;  // [64]: G, beta, beta e^G, e^(G_last - G)

    Chunk(unsigned char* scratch, uint32_t kd_, uint32_t vd_) : n(0), kd(kd_), vd(vd_) {
      const size_t kx = size_t{kC} * kd, vx = size_t{kC} * vd, cc = size_t{kC} * kC;
      q = scratch_at<float>(scratch, 0);
      k = q + kx;
      kt = k + kx;
      w = kt + kx;
      v = w + kx;
      u = v + vx;
      a = u + vx;
      p = a + cc;
      mu = p + cc;
      mw = mu + cc;
      gsum = mw + cc;
      beta = gsum + kC;
      bg = beta + kC;
      ek = bg + kC;
    }
  };

  // C[i][c] = scale * Cin[i][c] (0 without Cin) +- sum_{j < inner} A[i][j] B[j][c] over rows
  // [0, rows) and columns [0, cols) (a multiple of kL). `tri`: row i's sum stops at j <= i (A is
  // zero above its diagonal), the block of rows i0.. at i0 + kRows; `tri_cols`: row block i0's
  // columns stop at the vector holding column i0 + kRows - 1 (C above the diagonal unused).
  struct Gemm {
    const float* a;
    size_t lda;
    const float* b;
    size_t ldb;
    const float* cin;  // may be c itself (each tile reads its own elements before writing them)
    size_t ldcin;
    float scale;
    float* c;
    size_t ldc;
    uint32_t rows, cols, inner;
    bool tri = false, tri_cols = false;
  };

  template <uint32_t R, uint32_t V, bool kSub>
  static void tile(const Gemm& g, uint32_t i0, uint32_t c0, uint32_t inner) {
    vf acc[R][V];
    const vf scale = Ops::set1(g.scale);
    for (uint32_t r = 0; r < R; ++r)
      for (uint32_t v = 0; v < V; ++v)
        acc[r][v] = g.cin ? Ops::mul(scale, Ops::load(g.cin + (i0 + r) * g.ldcin + c0 + v * kL)) : Ops::zero();
    const float* arow = g.a + size_t{i0} * g.lda;
    const float* bcol = g.b + c0;
    for (uint32_t j = 0; j < inner; ++j) {
      vf bv[V];
      for (uint32_t v = 0; v < V; ++v) bv[v] = Ops::load(bcol + j * g.ldb + v * kL);
      for (uint32_t r = 0; r < R; ++r) {
        const vf x = Ops::set1(arow[r * g.lda + j]);
        for (uint32_t v = 0; v < V; ++v) acc[r][v] = kSub ? Ops::fnmadd(x, bv[v], acc[r][v]) : Ops::fma(x, bv[v], acc[r][v]);
      }
    }
    for (uint32_t r = 0; r < R; ++r)
      for (uint32_t v = 0; v < V; ++v) Ops::store(g.c + (i0 + r) * g.ldc + c0 + v * kL, acc[r][v]);
  }

  template <uint32_t R, bool kSub>
  static void row_block(const Gemm& g, uint32_t i0) {
    constexpr uint32_t kV = Ops::kVecs;
    const uint32_t inner = g.tri ? min_u32(g.inner, i0 + R) : g.inner;
    const uint32_t cols = g.tri_cols ? min_u32(g.cols, (i0 + R + kL - 1) / kL * kL) : g.cols;
    uint32_t c0 = 0;
    for (; c0 + kV * kL <= cols; c0 += kV * kL) tile<R, kV, kSub>(g, i0, c0, inner);
    for (; c0 < cols; c0 += kL) tile<R, 1, kSub>(g, i0, c0, inner);
  }

  template <bool kSub = false>
  static void gemm(const Gemm& g) {
    constexpr uint32_t kR = Ops::kRows;
    uint32_t i0 = 0;
    for (; i0 + kR <= g.rows; i0 += kR) row_block<kR, kSub>(g, i0);
    for (; i0 < g.rows; ++i0) row_block<1, kSub>(g, i0);
  }

  // out[0, n) = in / sqrt(sum in^2 + 1e-6) * scale, n bf16 (a multiple of kL).
  static void l2_normalised(const uint16_t* in, uint32_t n, float scale, float* out) {
    vf squares = Ops::zero();
    for (uint32_t i = 0; i < n; i += kL) {
      const vf x = Ops::load_bf16(in + i);
      Ops::store(out + i, x);
      squares = Ops::fma(x, x, squares);
    }
    const vf factor = Ops::set1(scale / std::sqrt(Ops::hsum(squares) + 1e-6f));
    for (uint32_t i = 0; i < n; i += kL) Ops::store(out + i, Ops::mul(Ops::load(out + i), factor));
  }

  // A token's q, k and v lie in three places of a long row (12 KB in Qwen3.5-0.8B), a page or
  // more from the previous token's: no hardware prefetcher follows, and the first load of each
  // took a sixth of the body's time. They are asked for kAhead tokens ahead.
  static constexpr uint32_t kAhead = 4;
  static void prefetch_token(const uint16_t* x, size_t q_at, size_t k_at, size_t v_at, const DeltaCall& c) {
    for (uint32_t e = 0; e < c.k_dim; e += 32) {
      _mm_prefetch(reinterpret_cast<const char*>(x + q_at + e), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(x + k_at + e), _MM_HINT_T0);
    }
    for (uint32_t e = 0; e < c.v_dim; e += 32) _mm_prefetch(reinterpret_cast<const char*>(x + v_at + e), _MM_HINT_T0);
  }

  // Tokens [row0, row0 + n) of value head h: q, k, Kt, v, G, beta; Kt's columns past n zero.
  static void load(Chunk& ch, const DeltaCall& c, uint32_t row0, uint32_t h) {
    const float qscale = 1.0f / std::sqrt(static_cast<float>(c.k_dim));
    const size_t kh = c.key_head(h);
    const size_t width = c.qkv_width(), vat = 2 * size_t{c.k_heads} * c.k_dim + size_t{h} * c.v_dim;
    float g = 0.0f;
    for (uint32_t i = 0; i < ch.n; ++i) {
      const uint16_t* x = c.qkv + size_t{row0 + i} * width;
      if (i + kAhead < ch.n) prefetch_token(x + kAhead * width, kh * c.k_dim, (c.k_heads + kh) * c.k_dim, vat, c);
      float* ki = ch.k + size_t{i} * ch.kd;
      l2_normalised(x + kh * c.k_dim, c.k_dim, qscale, ch.q + size_t{i} * ch.kd);
      l2_normalised(x + (c.k_heads + kh) * c.k_dim, c.k_dim, 1.0f, ki);
      for (uint32_t r = 0; r < ch.kd; ++r) ch.kt[size_t{r} * kC + i] = ki[r];
      const uint16_t* vr = x + vat;
      for (uint32_t j = 0; j < c.v_dim; j += kL) Ops::store(ch.v + size_t{i} * ch.vd + j, Ops::load_bf16(vr + j));
      g += delta_gate(c, row0 + i, h);
      ch.gsum[i] = g;
      ch.beta[i] = delta_beta(c, row0 + i, h);
    }
    const float last = ch.gsum[ch.n - 1];
    for (uint32_t i = 0; i < kC; ++i) {
      const bool in = i < ch.n;
      ch.bg[i] = in ? ch.beta[i] * std::exp(ch.gsum[i]) : 0.0f;
      ch.ek[i] = in ? std::exp(last - ch.gsum[i]) : 0.0f;
      if (!in) ch.gsum[i] = last, ch.beta[i] = 0.0f;
    }
    if (ch.n < kC)
      for (uint32_t r = 0; r < ch.kd; ++r)
        for (uint32_t i = ch.n; i < kC; ++i) ch.kt[size_t{r} * kC + i] = 0.0f;
  }

  // A = -(beta_i KK[i][j] e^(G_i - G_j)), j < i, and P = QK[i][j] e^(G_i - G_j), j <= i, in place
  // over KK and QK; zero elsewhere (so the masked lanes' exp of a positive difference is dropped).
  static void decayed(Chunk& ch) {
    for (uint32_t i = 0; i < ch.n; ++i) {
      const vf gi = Ops::set1(ch.gsum[i]), nb = Ops::set1(-ch.beta[i]);
      float* ai = ch.a + size_t{i} * kC;
      float* pi = ch.p + size_t{i} * kC;
      for (uint32_t v = 0; v < kCV; ++v) {
        const uint32_t j0 = v * kL;
        const vf d = Ops::exp_nonpositive(Ops::sub(gi, Ops::load(ch.gsum + j0)));
        const int below = static_cast<int>(i) - static_cast<int>(j0);
        Ops::store(ai + j0, Ops::first(Ops::mul(nb, Ops::mul(Ops::load(ai + j0), d)), below));
        Ops::store(pi + j0, Ops::first(Ops::mul(Ops::load(pi + j0), d), below + 1));
      }
    }
  }

  // T = (I - A)^-1 - I in place over A, row by row (rows m < i already T): T_i = A_i + sum_{m<i}
  // A[i][m] T_m; then Mu = (I + T) diag(beta) and Mw = (I + T) diag(beta e^G).
  static void solve_t(Chunk& ch) {
    for (uint32_t i = 1; i < ch.n; ++i) {
      float* ti = ch.a + size_t{i} * kC;
      vf acc[kCV];
      for (uint32_t v = 0; v < kCV; ++v) acc[v] = Ops::load(ti + v * kL);
      for (uint32_t m = 0; m < i; ++m) {
        const vf x = Ops::set1(ti[m]);
        const float* tm = ch.a + size_t{m} * kC;
        for (uint32_t v = 0; v < kCV; ++v) acc[v] = Ops::fma(x, Ops::load(tm + v * kL), acc[v]);
      }
      for (uint32_t v = 0; v < kCV; ++v) Ops::store(ti + v * kL, acc[v]);
    }
    for (uint32_t i = 0; i < ch.n; ++i) {
      float* ti = ch.a + size_t{i} * kC;
      ti[i] += 1.0f;  // I + T, then back below
      for (uint32_t v = 0; v < kCV; ++v) {
        const vf t = Ops::load(ti + v * kL);
        Ops::store(ch.mu + size_t{i} * kC + v * kL, Ops::mul(t, Ops::load(ch.beta + v * kL)));
        Ops::store(ch.mw + size_t{i} * kC + v * kL, Ops::mul(t, Ops::load(ch.bg + v * kL)));
      }
      ti[i] -= 1.0f;
    }
  }

  // One chunk against S: U, W, V', O (into v), then the state update.
  static void products(Chunk& ch, float* s) {
    const uint32_t n = ch.n, kd = ch.kd, vd = ch.vd;
    gemm({ch.k, kd, ch.kt, kC, nullptr, 0, 0.0f, ch.a, kC, n, kC, kd, false, true});   // KK
    gemm({ch.q, kd, ch.kt, kC, nullptr, 0, 0.0f, ch.p, kC, n, kC, kd, false, true});   // QK
    decayed(ch);
    solve_t(ch);
    gemm({ch.mu, kC, ch.v, vd, nullptr, 0, 0.0f, ch.u, vd, n, vd, n, true});           // U
    gemm({ch.mw, kC, ch.k, kd, nullptr, 0, 0.0f, ch.w, kd, n, kd, n, true});           // W
    gemm<true>({ch.w, kd, s, vd, ch.u, vd, 1.0f, ch.u, vd, n, vd, kd});                // V' = U - W S
    for (uint32_t i = 0; i < n; ++i) {  // Q e^G
      const vf e = Ops::set1(std::exp(ch.gsum[i]));
      float* qi = ch.q + size_t{i} * kd;
      for (uint32_t r = 0; r < kd; r += kL) Ops::store(qi + r, Ops::mul(Ops::load(qi + r), e));
    }
    gemm({ch.q, kd, s, vd, nullptr, 0, 0.0f, ch.v, vd, n, vd, kd});                    // O = Q e^G S
    gemm({ch.p, kC, ch.u, vd, ch.v, vd, 1.0f, ch.v, vd, n, vd, n, true});              // O += P V'
    for (uint32_t r = 0; r < kd; ++r) {  // Kt e^(G_last - G)
      float* row = ch.kt + size_t{r} * kC;
      for (uint32_t v = 0; v < kCV; ++v) Ops::store(row + v * kL, Ops::mul(Ops::load(row + v * kL), Ops::load(ch.ek + v * kL)));
    }
    const float decay = std::exp(ch.gsum[n - 1]);
    gemm({ch.kt, kC, ch.u, vd, s, vd, decay, s, vd, kd, vd, n});                       // S update
  }

  // Block (bx, by): run bx, value head by, chunk by chunk (the last one shorter).
  static void run(const DeltaCall& c, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const FlushSubnormals flush;
    const Run run = run_at(c.runs, bx);
    float* s = c.matrix(run.slot, by);
    Chunk ch(scratch, c.k_dim, c.v_dim);
    for (uint32_t done = 0; done < run.rows; done += kC) {
      ch.n = min_u32(kC, run.rows - done);
      const uint32_t row0 = run.first + done;
      load(ch, c, row0, by);
      products(ch, s);
      for (uint32_t i = 0; i < ch.n; ++i) {
        uint16_t* out = c.out + (size_t{row0 + i} * c.v_heads + by) * c.v_dim;
        const float* oi = ch.v + size_t{i} * c.v_dim;
        for (uint32_t j = 0; j < c.v_dim; j += kL) Ops::store_bf16(out + j, Ops::load(oi + j));
      }
    }
  }
};

// deltanet/delta_rule_recurrent in vector registers: per token, S in strips of kVecs vectors of
// columns, each strip read once from memory for both S^T k and S^T q (old S), then
//   u = beta (v - e^g S^T k),  o = e^g S^T q + (k.q) u  (= S_new^T q),  S <- e^g S + k (x) u
// written back from the strip still in L1 (kd rows x 64 columns: 32 KB at k_dim 128): S goes
// through memory once each way, where the baseline's two sweeps read and write it twice. The sums
// are the baseline's reassociated (o from S^T q before the update, not after). One thread per
// (run, head), a fixed order: the same bits at any thread count.
template <class Ops>
struct DeltaRecurrentSimd {
  using vf = typename Ops::vf;
  static constexpr uint32_t kL = Ops::kLanes;
  using Chunked = DeltaChunkedSimd<Ops>;

  struct Token {
    const float* q;
    const float* k;
    const float* v;
    float decay, beta, kq;
    uint32_t kd, vd;
  };

  template <uint32_t V>
  static void strip(const Token& t, float* s, uint32_t c0, uint16_t* out) {
    vf sk[V], sq[V];
    for (uint32_t v = 0; v < V; ++v) sk[v] = Ops::zero(), sq[v] = Ops::zero();
    for (uint32_t r = 0; r < t.kd; ++r) {
      const vf kr = Ops::set1(t.k[r]), qr = Ops::set1(t.q[r]);
      const float* row = s + size_t{r} * t.vd + c0;
      for (uint32_t v = 0; v < V; ++v) {
        const vf x = Ops::load(row + v * kL);
        sk[v] = Ops::fma(x, kr, sk[v]);
        sq[v] = Ops::fma(x, qr, sq[v]);
      }
    }
    const vf decay = Ops::set1(t.decay), beta = Ops::set1(t.beta), kq = Ops::set1(t.kq);
    vf u[V];
    for (uint32_t v = 0; v < V; ++v) {
      u[v] = Ops::mul(beta, Ops::fnmadd(decay, sk[v], Ops::load(t.v + c0 + v * kL)));
      Ops::store_bf16(out + c0 + v * kL, Ops::fma(kq, u[v], Ops::mul(decay, sq[v])));
    }
    for (uint32_t r = 0; r < t.kd; ++r) {
      const vf kr = Ops::set1(t.k[r]);
      float* row = s + size_t{r} * t.vd + c0;
      for (uint32_t v = 0; v < V; ++v) Ops::store(row + v * kL, Ops::fma(kr, u[v], Ops::mul(decay, Ops::load(row + v * kL))));
    }
  }

  // Block (bx, by): run bx, value head by, token by token. Scratch: q, k [k_dim], v [v_dim] f32.
  static void run(const DeltaCall& c, uint32_t bx, uint32_t by, unsigned char* scratch) {
    const FlushSubnormals flush;
    const Run run = run_at(c.runs, bx);
    const uint32_t kd = c.k_dim, vd = c.v_dim;
    float* s = c.matrix(run.slot, by);
    float* q = scratch_at<float>(scratch, 0);
    float* k = q + kd;
    float* v = k + kd;
    const size_t kh = c.key_head(by);
    for (uint32_t i = 0; i < run.rows; ++i) {
      const uint32_t row = run.first + i;
      const uint16_t* x = c.qkv + size_t{row} * c.qkv_width();
      Chunked::l2_normalised(x + kh * kd, kd, 1.0f / std::sqrt(static_cast<float>(kd)), q);
      Chunked::l2_normalised(x + (c.k_heads + kh) * kd, kd, 1.0f, k);
      const uint16_t* vr = x + 2 * size_t{c.k_heads} * kd + size_t{by} * vd;
      vf kq = Ops::zero();
      for (uint32_t r = 0; r < kd; r += kL) kq = Ops::fma(Ops::load(k + r), Ops::load(q + r), kq);
      for (uint32_t j = 0; j < vd; j += kL) Ops::store(v + j, Ops::load_bf16(vr + j));
      const Token t{q, k, v, std::exp(delta_gate(c, row, by)), delta_beta(c, row, by), Ops::hsum(kq), kd, vd};
      uint16_t* out = c.out + (size_t{row} * c.v_heads + by) * vd;
      constexpr uint32_t kV = Ops::kVecs;
      uint32_t c0 = 0;
      for (; c0 + kV * kL <= vd; c0 += kV * kL) strip<kV>(t, s, c0, out);
      for (; c0 < vd; c0 += kL) strip<1>(t, s, c0, out);
    }
  }
};

}  // namespace
}  // namespace metrale::cpu
