// SPDX-License-Identifier: MIT OR Apache-2.0
// Baseline body of deltanet/delta_rule_chunked (docs/kernels.md, "Module deltanet"): the gated
// delta rule over chunks of 64 tokens in the WY (UT-transform) form of flash-linear-attention
// and transformers' torch_chunk_gated_delta_rule. Within a chunk of L tokens, with G the
// cumulative sum of g:
//   A = -(diag(beta) K K^T * e^(G_i - G_j)) strictly lower, T = (I - A)^-1 (forward substitution),
//   U = T diag(beta) V, W = T diag(beta) e^G K, V' = U - W S,
//   O = (Q * e^G) S + (Q K^T * e^(G_i - G_j))_lower-incl V',
//   S <- e^(G_last) S + (K * e^(G_last - G))^T V'.
// S [k_dim][v_dim] stays in its slot; the chunk's matrices ([L][L] and [L][dim], one chunk of
// one head) live in the block's scratch. Arguments were validated at launch (deltanet_table.cpp).
#include "deltanet_calls.hpp"
#include "kernels.hpp"
#include "numeric.hpp"

#include <cmath>

namespace metrale::cpu::baseline {
namespace {

constexpr uint32_t kC = kDeltaChunk;

// One chunk of one head: rows [0, n) of each [64][dim] matrix.
struct Chunk {
  uint32_t n, kd, vd;
  float* q;     // [64][kd]: q of each token
  float* k;     // [64][kd]
  float* u;     // [64][vd]: v, then beta v, then U, then V'
  float* w;     // [64][kd]: W
  float* t;     // [64][64]: A, then T (strictly lower; the unit diagonal implied)
  float* o;     // [64][vd]: the outputs
  float* gsum;  // [64]: G
  float* beta;  // [64]

  Chunk(unsigned char* scratch, uint32_t kd_, uint32_t vd_) : n(0), kd(kd_), vd(vd_) {
    q = scratch_at<float>(scratch, 0);
    k = q + size_t{kC} * kd;
    u = k + size_t{kC} * kd;
    w = u + size_t{kC} * vd;
    t = w + size_t{kC} * kd;
    o = t + size_t{kC} * kC;
    gsum = o + size_t{kC} * vd;
    beta = gsum + kC;
  }
};

float dot(const float* a, const float* b, uint32_t n) {
  float sum = 0.0f;
  for (uint32_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y[0, n) += x[0, n) * f
inline void axpy(float* y, const float* x, float f, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) y[i] += x[i] * f;
}

// Tokens [row0, row0 + n) of value head h: q, k, v, beta, G.
void load(Chunk& ch, const DeltaCall& c, uint32_t row0, uint32_t h) {
  float g = 0.0f;
  for (uint32_t i = 0; i < ch.n; ++i) {
    delta_token(c, row0 + i, h, ch.q + size_t{i} * ch.kd, ch.k + size_t{i} * ch.kd, ch.u + size_t{i} * ch.vd);
    g += delta_gate(c, row0 + i, h);
    ch.gsum[i] = g;
    ch.beta[i] = delta_beta(c, row0 + i, h);
  }
}

// T = (I - A)^-1 - I, strictly lower, over A = -(beta_i k_i.k_j e^(G_i - G_j)), j < i: row i's
// T[i][j] = A[i][j] + sum_{j < m < i} A[i][m] T[m][j], in place (ascending j reads A[i][m] with
// m > j, not yet overwritten).
void solve_t(Chunk& ch) {
  for (uint32_t i = 0; i < ch.n; ++i) {
    float* ti = ch.t + size_t{i} * kC;
    for (uint32_t j = 0; j < i; ++j)
      ti[j] = -ch.beta[i] * dot(ch.k + size_t{i} * ch.kd, ch.k + size_t{j} * ch.kd, ch.kd) *
              std::exp(ch.gsum[i] - ch.gsum[j]);
    for (uint32_t j = 0; j < i; ++j) {
      float sum = ti[j];
      for (uint32_t m = j + 1; m < i; ++m) sum += ti[m] * ch.t[size_t{m} * kC + j];
      ti[j] = sum;
    }
  }
}

// rows[i] <- rows[i] + sum_{j < i} T[i][j] rows[j] for i descending (rows j < i still the
// inputs): (I + T_strict) rows, in place, rows of `width`.
void apply_t(const Chunk& ch, float* rows, uint32_t width) {
  for (uint32_t i = ch.n; i-- > 1;) {
    float* ri = rows + size_t{i} * width;
    const float* ti = ch.t + size_t{i} * kC;
    for (uint32_t j = 0; j < i; ++j) axpy(ri, rows + size_t{j} * width, ti[j], width);
  }
}

// U = T diag(beta) V over u, W = T diag(beta) e^G K into w, then V' = U - W S over u.
void corrected_values(Chunk& ch, const float* s) {
  for (uint32_t i = 0; i < ch.n; ++i) {
    float* ui = ch.u + size_t{i} * ch.vd;
    for (uint32_t j = 0; j < ch.vd; ++j) ui[j] *= ch.beta[i];
    const float f = ch.beta[i] * std::exp(ch.gsum[i]);
    const float* ki = ch.k + size_t{i} * ch.kd;
    float* wi = ch.w + size_t{i} * ch.kd;
    for (uint32_t j = 0; j < ch.kd; ++j) wi[j] = ki[j] * f;
  }
  apply_t(ch, ch.u, ch.vd);
  apply_t(ch, ch.w, ch.kd);
  for (uint32_t i = 0; i < ch.n; ++i) {
    float* ui = ch.u + size_t{i} * ch.vd;
    const float* wi = ch.w + size_t{i} * ch.kd;
    for (uint32_t r = 0; r < ch.kd; ++r) axpy(ui, s + size_t{r} * ch.vd, -wi[r], ch.vd);
  }
}

// O = (Q e^G) S + (Q K^T * e^(G_i - G_j))_{j <= i} V', into o.
void outputs(Chunk& ch, const float* s) {
  for (uint32_t i = 0; i < ch.n; ++i) {
    float* oi = ch.o + size_t{i} * ch.vd;
    const float* qi = ch.q + size_t{i} * ch.kd;
    for (uint32_t j = 0; j < ch.vd; ++j) oi[j] = 0.0f;
    for (uint32_t r = 0; r < ch.kd; ++r) axpy(oi, s + size_t{r} * ch.vd, qi[r], ch.vd);
    const float decay = std::exp(ch.gsum[i]);
    for (uint32_t j = 0; j < ch.vd; ++j) oi[j] *= decay;
    for (uint32_t j = 0; j <= i; ++j) {
      const float p = dot(qi, ch.k + size_t{j} * ch.kd, ch.kd) * std::exp(ch.gsum[i] - ch.gsum[j]);
      axpy(oi, ch.u + size_t{j} * ch.vd, p, ch.vd);
    }
  }
}

// S <- e^(G_last) S + sum_j (k_j e^(G_last - G_j)) (x) v'_j.
void update_state(const Chunk& ch, float* s) {
  const float last = ch.gsum[ch.n - 1], decay = std::exp(last);
  for (size_t e = 0; e < size_t{ch.kd} * ch.vd; ++e) s[e] *= decay;
  for (uint32_t j = 0; j < ch.n; ++j) {
    const float f = std::exp(last - ch.gsum[j]);
    const float* kj = ch.k + size_t{j} * ch.kd;
    const float* vj = ch.u + size_t{j} * ch.vd;
    for (uint32_t r = 0; r < ch.kd; ++r) axpy(s + size_t{r} * ch.vd, vj, kj[r] * f, ch.vd);
  }
}

}  // namespace

// Block (bx, by): run bx, value head by, chunk by chunk (the last one shorter).
void delta_rule_chunked(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  const DeltaCall c = delta_call(args);
  const Run run = run_at(c.runs, bx);
  float* s = c.matrix(run.slot, by);
  Chunk ch(scratch, c.k_dim, c.v_dim);
  for (uint32_t done = 0; done < run.rows; done += kC) {
    ch.n = min_u32(kC, run.rows - done);
    const uint32_t row0 = run.first + done;
    load(ch, c, row0, by);
    solve_t(ch);
    corrected_values(ch, s);
    outputs(ch, s);
    update_state(ch, s);
    for (uint32_t i = 0; i < ch.n; ++i) {
      uint16_t* out = c.out + (size_t{row0 + i} * c.v_heads + by) * c.v_dim;
      const float* oi = ch.o + size_t{i} * c.v_dim;
      for (uint32_t j = 0; j < c.v_dim; ++j) out[j] = f32_to_bf16(oi[j]);
    }
  }
}

}  // namespace metrale::cpu::baseline
