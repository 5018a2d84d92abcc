// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `deltanet` (docs/kernels.md): the Gated DeltaNet mixer of Qwen3.5 / Qwen3-Next over the
// per-sequence state slots of a runs table (i32 [n_runs][3]: first_row, rows, slot). A slot's
// state is f32: the convolution window [kernel_size − 1][channels] (conv_silu), the matrices
// S [v_heads][k_dim][v_dim] (the delta rules), at `base + slot · state_stride`.
//
// Nothing is reduced in an order that depends on the block size: every value is computed by one
// thread in a fixed order (the l2 norms of q and k serially over k_dim, gated_norm's sum of
// squares over fixed lanes), so any 1-D block gives the same bits. A run with a negative field,
// or a shape outside the contract (kernel_size 2..8; k_dim, v_dim 16..256; v_heads a multiple of
// k_heads), is skipped: the device cannot fail the launch.
#include "metrale_common.cuh"

namespace {

constexpr unsigned kMaxConv = 8;    // conv_silu: kernel_size 2..8
constexpr unsigned kMaxDim = 256;   // k_dim, v_dim 16..256
constexpr unsigned kChunk = 64;     // delta_rule_chunked: tokens per chunk
constexpr unsigned kKTile = 16;     // k_dim positions per tile of Q and K
constexpr unsigned kColTile = 32;   // v_dim columns per pass (and k_dim rows per state-update tile)
constexpr float kL2Eps = 1e-6f;

struct SeqRun {
  unsigned first, rows, slot;
  bool ok;
};

__device__ __forceinline__ SeqRun read_run(const int* runs, unsigned r) {
  const int first = runs[3 * r], rows = runs[3 * r + 1], slot = runs[3 * r + 2];
  return {static_cast<unsigned>(first), static_cast<unsigned>(rows), static_cast<unsigned>(slot),
          first >= 0 && rows >= 0 && slot >= 0};
}

// softplus(x) = log(1 + e^x), x itself above 20 (torch's threshold).
__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// 1 / sqrt(Σ x² + 1e−6) over n bf16 values, summed in index order by the calling thread.
__device__ float inv_l2(const __nv_bfloat16* x, unsigned n) {
  float sum = 0.f;
  for (unsigned i = 0; i < n; ++i) {
    const float v = metrale::to_f32(x[i]);
    sum += v * v;
  }
  return 1.f / sqrtf(sum + kL2Eps);
}

// Where one (run, value head) of the delta rules reads and writes.
struct Head {
  const __nv_bfloat16* qkv;  // row 0 of the activations
  size_t width;              // qkv row: 2 · k_heads · k_dim + v_heads · v_dim
  unsigned q_at, k_at, v_at; // this head's q, k (key head) and v columns in a row
  const __nv_bfloat16 *a, *b;
  unsigned v_heads, h, k_dim, v_dim;
  float a_log_exp, dt_bias, q_scale;
  float* s;                  // S [k_dim][v_dim] of the run's slot
  __nv_bfloat16* out;        // row 0's [v_heads][v_dim]

  __device__ const __nv_bfloat16* q_row(size_t row) const { return qkv + row * width + q_at; }
  __device__ const __nv_bfloat16* k_row(size_t row) const { return qkv + row * width + k_at; }
  __device__ const __nv_bfloat16* v_row(size_t row) const { return qkv + row * width + v_at; }
  // g = −exp(a_log) · softplus(a + dt_bias) of a row.
  __device__ float gate(size_t row) const {
    return -a_log_exp * softplus(metrale::to_f32(a[row * v_heads + h]) + dt_bias);
  }
  // β = bf16(σ(b)) of a row.
  __device__ float beta(size_t row) const {
    return metrale::to_f32(metrale::to_bf16(metrale::sigmoid(metrale::to_f32(b[row * v_heads + h]))));
  }
  __device__ __nv_bfloat16* out_row(size_t row) const { return out + (row * v_heads + h) * v_dim; }
};

// The block's head, or ok = false for a block past the grid's work or a shape outside the contract.
__device__ bool head_of(Head& hd, const __nv_bfloat16* qkv, const __nv_bfloat16* a, const __nv_bfloat16* b,
                        const float* a_log, const float* dt_bias, float* states, const int* runs, __nv_bfloat16* out,
                        unsigned n_runs, unsigned k_heads, unsigned v_heads, unsigned k_dim, unsigned v_dim,
                        unsigned state_stride, SeqRun& run) {
  if (blockIdx.x >= n_runs || blockIdx.y >= v_heads || k_heads == 0 || v_heads % k_heads != 0) return false;
  if (k_dim < 16 || k_dim > kMaxDim || v_dim < 16 || v_dim > kMaxDim) return false;
  run = read_run(runs, blockIdx.x);
  if (!run.ok) return false;
  const unsigned h = blockIdx.y, kh = h / (v_heads / k_heads);
  hd.qkv = qkv;
  hd.width = static_cast<size_t>(2) * k_heads * k_dim + static_cast<size_t>(v_heads) * v_dim;
  hd.q_at = kh * k_dim;
  hd.k_at = (k_heads + kh) * k_dim;
  hd.v_at = 2 * k_heads * k_dim + h * v_dim;
  hd.a = a;
  hd.b = b;
  hd.v_heads = v_heads;
  hd.h = h;
  hd.k_dim = k_dim;
  hd.v_dim = v_dim;
  hd.a_log_exp = expf(a_log[h]);
  hd.dt_bias = dt_bias[h];
  hd.q_scale = 1.f / sqrtf(static_cast<float>(k_dim));
  hd.s = states + static_cast<size_t>(run.slot) * state_stride + static_cast<size_t>(h) * k_dim * v_dim;
  hd.out = out;
  return true;
}

}  // namespace

// Grid (n_runs, 1): run blockIdx.x's causal depthwise convolution with SiLU, threads over
// channels; each channel's last kernel_size − 1 inputs in registers, the window written back.
extern "C" __global__ void conv_silu(const __nv_bfloat16* x, const __nv_bfloat16* weight, float* conv_states,
                                     const int* runs, __nv_bfloat16* out, unsigned n_runs, unsigned channels,
                                     unsigned kernel_size, unsigned state_stride) {
  if (blockIdx.x >= n_runs || kernel_size < 2 || kernel_size > kMaxConv) return;
  const SeqRun run = read_run(runs, blockIdx.x);
  if (!run.ok) return;
  float* window = conv_states + static_cast<size_t>(run.slot) * state_stride;
  const unsigned taps = kernel_size - 1;
  for (unsigned c = threadIdx.x; c < channels; c += blockDim.x) {
    float w[kMaxConv], in[kMaxConv];  // in[0 .. taps−1]: the previous inputs, oldest first
#pragma unroll
    for (unsigned j = 0; j < kMaxConv; ++j) {
      w[j] = j < kernel_size ? metrale::to_f32(weight[static_cast<size_t>(c) * kernel_size + j]) : 0.f;
      in[j] = j < taps ? window[static_cast<size_t>(j) * channels + c] : 0.f;
    }
    for (unsigned t = 0; t < run.rows; ++t) {
      const size_t at = (static_cast<size_t>(run.first) + t) * channels + c;
      const float latest = metrale::to_f32(x[at]);
      float y = 0.f;
#pragma unroll
      for (unsigned j = 0; j < kMaxConv; ++j) {
        if (j < taps) y += w[j] * in[j];
        if (j == taps) y += w[j] * latest;
      }
      out[at] = metrale::to_bf16(metrale::silu(metrale::to_f32(metrale::to_bf16(y))));
#pragma unroll
      for (unsigned j = 0; j + 1 < kMaxConv; ++j) {
        if (j + 1 < taps) in[j] = in[j + 1];
      }
#pragma unroll
      for (unsigned j = 0; j < kMaxConv; ++j) {
        if (j == taps - 1) in[j] = latest;
      }
    }
#pragma unroll
    for (unsigned j = 0; j < kMaxConv; ++j) {
      if (j < taps) window[static_cast<size_t>(j) * channels + c] = in[j];
    }
  }
}

// Grid (n_runs, v_heads): the gated delta rule token by token for run blockIdx.x and value head
// blockIdx.y. Per token, q and k (normalised, in shared memory), then threads over v_dim columns:
// column j of S decayed, u_j = β (v_j − Σ_i S[i][j] k_i), S[:, j] += k u_j, out_j = Σ_i S[i][j] q_i,
// S updated in place in global memory.
extern "C" __global__ void delta_rule_recurrent(const __nv_bfloat16* qkv, const __nv_bfloat16* a,
                                                const __nv_bfloat16* b, const float* a_log, const float* dt_bias,
                                                float* states, const int* runs, __nv_bfloat16* out, unsigned n_runs,
                                                unsigned k_heads, unsigned v_heads, unsigned k_dim, unsigned v_dim,
                                                unsigned state_stride) {
  __shared__ float qs[kMaxDim], ks[kMaxDim], scalars[4];
  Head hd;
  SeqRun run;
  if (!head_of(hd, qkv, a, b, a_log, dt_bias, states, runs, out, n_runs, k_heads, v_heads, k_dim, v_dim, state_stride,
               run))
    return;
  for (unsigned t = 0; t < run.rows; ++t) {
    const size_t row = static_cast<size_t>(run.first) + t;
    for (unsigned w = threadIdx.x; w < 4; w += blockDim.x) {
      scalars[w] = w == 0 ? inv_l2(hd.q_row(row), k_dim)
                   : w == 1 ? inv_l2(hd.k_row(row), k_dim)
                   : w == 2 ? expf(hd.gate(row))
                            : hd.beta(row);
    }
    __syncthreads();
    const float inv_q = scalars[0], inv_k = scalars[1], decay = scalars[2], beta = scalars[3];
    for (unsigned i = threadIdx.x; i < k_dim; i += blockDim.x) {
      qs[i] = metrale::to_f32(hd.q_row(row)[i]) * inv_q * hd.q_scale;
      ks[i] = metrale::to_f32(hd.k_row(row)[i]) * inv_k;
    }
    __syncthreads();
    for (unsigned j = threadIdx.x; j < v_dim; j += blockDim.x) {
      float* col = hd.s + j;
      float kv = 0.f;
      for (unsigned i = 0; i < k_dim; ++i) kv += col[static_cast<size_t>(i) * v_dim] * decay * ks[i];
      const float u = beta * (metrale::to_f32(hd.v_row(row)[j]) - kv);
      float o = 0.f;
      for (unsigned i = 0; i < k_dim; ++i) {
        const float s = col[static_cast<size_t>(i) * v_dim] * decay + ks[i] * u;
        col[static_cast<size_t>(i) * v_dim] = s;
        o += s * qs[i];
      }
      hd.out_row(row)[j] = metrale::to_bf16(o);
    }
    // No barrier here: the next token's scalars are written by threads past this token's second
    // barrier, after every thread read them; qs and ks only after its first, which no thread
    // passes before every thread has left this token's columns.
  }
}

namespace {

// delta_rule_chunked's shared memory: 44.5 KiB, within sm_80's 48 KiB of static shared memory.
struct ChunkShared {
  float tp[kChunk][kChunk];  // T = (I − A)⁻¹ strictly below the diagonal; P[t][s] (s < t) at [s][t]
  float p_diag[kChunk];      // P[t][t]
  float g[kChunk];           // G, the cumulative sum of g over the chunk
  float beta[kChunk], inv_q[kChunk], inv_k[kChunk];
  float e_g[kChunk], e_last[kChunk];  // e^G_t and e^(G_last − G_t)
  float row[kChunk];                  // the row of T being solved
  float s_tile[kKTile][kColTile];     // rows of S for a column tile
  float x[kChunk][kColTile];          // K S, then X = β ⊙ (V − e^G ⊙ K S)
  union {
    float qk[2][kChunk][kKTile + 1];  // a tile of Q, then of K (normalised; zero past k_dim and n)
    float v_new[kChunk][kColTile];    // V' = T X
  } a;
  union {
    float qs[kChunk][kColTile];         // Q S
    float k_decayed[kChunk][kColTile];  // K ⊙ e^(G_last − G) for a tile of k_dim
  } b;
};

// Per token of the chunk: the l2 norms' inverses, β, G and its exponentials.
__device__ void chunk_scalars(ChunkShared& sh, const Head& hd, size_t row0, unsigned n) {
  for (unsigned t = threadIdx.x; t < n; t += blockDim.x) {
    sh.inv_q[t] = inv_l2(hd.q_row(row0 + t), hd.k_dim);
    sh.inv_k[t] = inv_l2(hd.k_row(row0 + t), hd.k_dim);
    sh.g[t] = hd.gate(row0 + t);
    sh.beta[t] = hd.beta(row0 + t);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned t = 1; t < n; ++t) sh.g[t] += sh.g[t - 1];
  }
  __syncthreads();
  for (unsigned t = threadIdx.x; t < n; t += blockDim.x) {
    sh.e_g[t] = expf(sh.g[t]);
    sh.e_last[t] = expf(sh.g[n - 1] - sh.g[t]);
  }
  __syncthreads();
}

// k_dim positions i0 .. i0 + kKTile − 1 of the chunk's normalised q (scaled) and k.
__device__ void load_qk(ChunkShared& sh, const Head& hd, size_t row0, unsigned n, unsigned i0) {
  for (unsigned e = threadIdx.x; e < kChunk * kKTile; e += blockDim.x) {
    const unsigned t = e / kKTile, ii = e % kKTile, i = i0 + ii;
    const bool ok = t < n && i < hd.k_dim;
    sh.a.qk[0][t][ii] = ok ? metrale::to_f32(hd.q_row(row0 + t)[i]) * sh.inv_q[t] * hd.q_scale : 0.f;
    sh.a.qk[1][t][ii] = ok ? metrale::to_f32(hd.k_row(row0 + t)[i]) * sh.inv_k[t] : 0.f;
  }
}

// A = −(diag(β) K Kᵀ ⊙ e^(G_t − G_s)) strictly below the diagonal, P = Q Kᵀ ⊙ e^(G_t − G_s) on and
// below it; each element one thread's dot product over k_dim in index order, tile after tile.
__device__ void chunk_matrices(ChunkShared& sh, const Head& hd, size_t row0, unsigned n) {
  const auto& q = sh.a.qk[0];
  const auto& k = sh.a.qk[1];
  for (unsigned i0 = 0; i0 < hd.k_dim; i0 += kKTile) {
    load_qk(sh, hd, row0, n, i0);
    __syncthreads();
    for (unsigned e = threadIdx.x; e < n * n; e += blockDim.x) {
      const unsigned t = e / n, s = e % n;
      if (s > t) continue;
      float kk = i0 == 0 || s == t ? 0.f : sh.tp[t][s];
      float qk = i0 == 0 ? 0.f : (s < t ? sh.tp[s][t] : sh.p_diag[t]);
      for (unsigned ii = 0; ii < kKTile; ++ii) {
        kk += k[t][ii] * k[s][ii];
        qk += q[t][ii] * k[s][ii];
      }
      if (s < t) {
        sh.tp[t][s] = kk;
        sh.tp[s][t] = qk;
      } else {
        sh.p_diag[t] = qk;
      }
    }
    __syncthreads();
  }
  for (unsigned e = threadIdx.x; e < n * n; e += blockDim.x) {
    const unsigned t = e / n, s = e % n;
    if (s >= t) continue;
    const float decay = expf(sh.g[t] - sh.g[s]);
    sh.tp[t][s] = -sh.beta[t] * sh.tp[t][s] * decay;
    sh.tp[s][t] *= decay;
  }
  __syncthreads();
}

// T = (I − A)⁻¹ in place of A by forward substitution, row by row:
// T[t][c] = A[t][c] + Σ_{c < s < t} A[t][s] T[s][c] (T unit lower triangular; row 1 is A's).
// Column c is always the same thread's, and a row reads T only in its own column, so one barrier
// a row (before row t's A is overwritten) suffices; the caller's next barrier publishes T.
__device__ void invert(ChunkShared& sh, unsigned n) {
  for (unsigned t = 2; t < n; ++t) {
    for (unsigned c = threadIdx.x; c < t; c += blockDim.x) {
      float v = sh.tp[t][c];
      for (unsigned s = c + 1; s < t; ++s) v += sh.tp[t][s] * sh.tp[s][c];
      sh.row[c] = v;
    }
    __syncthreads();
    for (unsigned c = threadIdx.x; c < t; c += blockDim.x) sh.tp[t][c] = sh.row[c];
  }
  __syncthreads();
}

// For columns j0 .. j0 + cols − 1: K S and Q S over k_dim tile by tile, then
// X = β ⊙ (V − e^G ⊙ K S) (so that T X = U − W S = V').
__device__ void chunk_project(ChunkShared& sh, const Head& hd, size_t row0, unsigned n, unsigned j0, unsigned cols) {
  const auto& q = sh.a.qk[0];
  const auto& k = sh.a.qk[1];
  for (unsigned i0 = 0; i0 < hd.k_dim; i0 += kKTile) {
    load_qk(sh, hd, row0, n, i0);
    for (unsigned e = threadIdx.x; e < kKTile * kColTile; e += blockDim.x) {
      const unsigned ii = e / kColTile, jj = e % kColTile, i = i0 + ii;
      sh.s_tile[ii][jj] = i < hd.k_dim && jj < cols ? hd.s[static_cast<size_t>(i) * hd.v_dim + j0 + jj] : 0.f;
    }
    __syncthreads();
    for (unsigned e = threadIdx.x; e < n * cols; e += blockDim.x) {
      const unsigned t = e / cols, jj = e % cols;
      float ks = i0 == 0 ? 0.f : sh.x[t][jj], qs = i0 == 0 ? 0.f : sh.b.qs[t][jj];
      for (unsigned ii = 0; ii < kKTile; ++ii) {
        ks += k[t][ii] * sh.s_tile[ii][jj];
        qs += q[t][ii] * sh.s_tile[ii][jj];
      }
      sh.x[t][jj] = ks;
      sh.b.qs[t][jj] = qs;
    }
    __syncthreads();
  }
  for (unsigned e = threadIdx.x; e < n * cols; e += blockDim.x) {
    const unsigned t = e / cols, jj = e % cols;
    sh.x[t][jj] = sh.beta[t] * (metrale::to_f32(hd.v_row(row0 + t)[j0 + jj]) - sh.e_g[t] * sh.x[t][jj]);
  }
  __syncthreads();
}

// For the same columns: V' = T X; O = (Q ⊙ e^G) S + P V' stored as bf16; then
// S ← e^(G_last) S + (K ⊙ e^(G_last − G))ᵀ V', k_dim rows kColTile at a time.
__device__ void chunk_update(ChunkShared& sh, const Head& hd, size_t row0, unsigned n, unsigned j0, unsigned cols) {
  for (unsigned e = threadIdx.x; e < n * cols; e += blockDim.x) {
    const unsigned t = e / cols, jj = e % cols;
    float v = sh.x[t][jj];
    for (unsigned s = 0; s < t; ++s) v += sh.tp[t][s] * sh.x[s][jj];
    sh.a.v_new[t][jj] = v;
  }
  __syncthreads();
  for (unsigned e = threadIdx.x; e < n * cols; e += blockDim.x) {
    const unsigned t = e / cols, jj = e % cols;
    float o = sh.e_g[t] * sh.b.qs[t][jj];
    for (unsigned s = 0; s < t; ++s) o += sh.tp[s][t] * sh.a.v_new[s][jj];
    o += sh.p_diag[t] * sh.a.v_new[t][jj];
    hd.out_row(row0 + t)[j0 + jj] = metrale::to_bf16(o);
  }
  __syncthreads();
  const float decay = sh.e_g[n - 1];
  for (unsigned i0 = 0; i0 < hd.k_dim; i0 += kColTile) {
    for (unsigned e = threadIdx.x; e < n * kColTile; e += blockDim.x) {
      const unsigned s = e / kColTile, ii = e % kColTile, i = i0 + ii;
      sh.b.k_decayed[s][ii] =
          i < hd.k_dim ? metrale::to_f32(hd.k_row(row0 + s)[i]) * sh.inv_k[s] * sh.e_last[s] : 0.f;
    }
    __syncthreads();
    for (unsigned e = threadIdx.x; e < kColTile * cols; e += blockDim.x) {
      const unsigned ii = e / cols, jj = e % cols, i = i0 + ii;
      if (i >= hd.k_dim) continue;
      float* at = hd.s + static_cast<size_t>(i) * hd.v_dim + j0 + jj;
      float v = decay * *at;
      for (unsigned s = 0; s < n; ++s) v += sh.b.k_decayed[s][ii] * sh.a.v_new[s][jj];
      *at = v;
    }
    __syncthreads();
  }
}

}  // namespace

// Grid (n_runs, v_heads): the same result as delta_rule_recurrent (up to f32 reassociation), each
// run in chunks of 64 tokens in the WY (UT-transform) form: per chunk the 64×64 matrices A → T and
// P in shared memory, then v_dim in passes of 32 columns (K S, Q S, V', the outputs, the update of
// those columns of S in global memory). Nothing larger than one chunk's 64×64 per head.
extern "C" __global__ void delta_rule_chunked(const __nv_bfloat16* qkv, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                              const float* a_log, const float* dt_bias, float* states, const int* runs,
                                              __nv_bfloat16* out, unsigned n_runs, unsigned k_heads, unsigned v_heads,
                                              unsigned k_dim, unsigned v_dim, unsigned state_stride) {
  __shared__ ChunkShared sh;
  Head hd;
  SeqRun run;
  if (!head_of(hd, qkv, a, b, a_log, dt_bias, states, runs, out, n_runs, k_heads, v_heads, k_dim, v_dim, state_stride,
               run))
    return;
  for (unsigned c0 = 0; c0 < run.rows; c0 += kChunk) {
    const size_t row0 = static_cast<size_t>(run.first) + c0;
    const unsigned n = min(run.rows - c0, kChunk);
    chunk_scalars(sh, hd, row0, n);
    chunk_matrices(sh, hd, row0, n);
    invert(sh, n);
    for (unsigned j0 = 0; j0 < v_dim; j0 += kColTile) {
      const unsigned cols = min(v_dim - j0, kColTile);
      chunk_project(sh, hd, row0, n, j0, cols);
      chunk_update(sh, hd, row0, n, j0, cols);
    }
  }
}

// Grid (rows, 1): y = bf16(weight · bf16(x · s) · silu(z)), s = 1 / sqrt(Σ x² / dim + eps) per
// row (weight f32); y may be x (each thread writes only what it read, after the reduction).
extern "C" __global__ void gated_norm(const __nv_bfloat16* x, const __nv_bfloat16* z, const float* weight,
                                     __nv_bfloat16* y, unsigned rows, unsigned dim, float eps) {
  __shared__ float lanes[metrale::kOrderedLanes];
  if (blockIdx.x >= rows) return;
  const size_t at = static_cast<size_t>(blockIdx.x) * dim;
  const float total = metrale::ordered_sum_squares(x + at, dim, lanes);
  const float scale = 1.f / sqrtf(total / static_cast<float>(dim) + eps);
  for (unsigned j = threadIdx.x; j < dim; j += blockDim.x) {
    const float n = metrale::to_f32(metrale::to_bf16(metrale::to_f32(x[at + j]) * scale));
    y[at + j] = metrale::to_bf16(weight[j] * n * metrale::silu(metrale::to_f32(z[at + j])));
  }
}
