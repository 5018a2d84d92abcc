# SPDX-License-Identifier: MIT OR Apache-2.0
"""A float64 numpy reference of the Gated DeltaNet mixer of Qwen3-Next and Qwen3.5, written from
transformers' modeling code (Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet: the causal depthwise
conv with SiLU, the gated delta rule in its chunked and recurrent forms, the gated RMSNorm), not
from metrale's kernels (docs/kernels.md, module `deltanet`). Exact arithmetic in float64 only: no
bf16 rounding anywhere; a caller that wants the kernels' rounding points applies them to the
inputs (run_deltanet_reference_tests.py, tests/python/test_deltanet_kernels.py).

Shapes, one sequence (a batch is a loop): tokens first.
  q, k   [T, k_heads, k_dim]      v   [T, v_heads, v_dim]
  g, beta [T, v_heads]            state S [v_heads, k_dim, v_dim]
Value head j reads key head j // (v_heads / k_heads). Per token and value head:
  q = l2(q) / sqrt(k_dim), k = l2(k), l2(x) = x / sqrt(sum x^2 + 1e-6)
  S <- S * e^g;  S <- S + k (x) beta * (v - S^T k);  o = S^T q
"""
import numpy as np

L2_EPS = 1e-6
CHUNK = 64
SOFTPLUS_THRESHOLD = 20.0  # torch's F.softplus: x itself above it


def softplus(x):
    x = np.asarray(x, np.float64)
    return np.where(x > SOFTPLUS_THRESHOLD, x, np.log1p(np.exp(np.minimum(x, SOFTPLUS_THRESHOLD))))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def silu(x):
    x = np.asarray(x, np.float64)
    return x * sigmoid(x)


def gates(a, b, a_log, dt_bias):
    """The decay g = -exp(A_log) * softplus(a + dt_bias) (log space, <= 0) and the write strength
    beta = sigmoid(b), from the projections a, b [T, v_heads] and the per-head A_log, dt_bias."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    g = -np.exp(np.asarray(a_log, np.float64)) * softplus(a + np.asarray(dt_bias, np.float64))
    return g, sigmoid(b)


def l2norm(x):
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


def _heads(q, k, v):
    """q and k normalised (q also scaled by k_dim^-1/2) and repeated to one per value head,
    v [H, T, dv]; every array heads first."""
    k_heads, v_heads = q.shape[1], v.shape[1]
    if v_heads % k_heads:
        raise ValueError(f"{v_heads} value heads are not a multiple of {k_heads} key heads")
    serve = np.arange(v_heads) // (v_heads // k_heads)  # the key head of each value head
    qn = l2norm(q)[:, serve] / np.sqrt(q.shape[-1])
    kn = l2norm(k)[:, serve]
    return (np.ascontiguousarray(x.transpose(1, 0, 2)) for x in (qn, kn, np.asarray(v, np.float64)))


def _initial(state, v_heads, k_dim, v_dim):
    if state is None:
        return np.zeros((v_heads, k_dim, v_dim))
    return np.array(state, np.float64, copy=True)


def delta_rule_recurrent(q, k, v, g, beta, state=None):
    """Token by token. Returns (out [T, v_heads, v_dim], final state [v_heads, k_dim, v_dim])."""
    q, k, v = _heads(q, k, v)
    g, beta = np.asarray(g, np.float64).T, np.asarray(beta, np.float64).T  # [H, T]
    s = _initial(state, v.shape[0], q.shape[2], v.shape[2])
    out = np.empty_like(v)
    for t in range(v.shape[1]):
        s *= np.exp(g[:, t])[:, None, None]
        predicted = np.einsum("hkv,hk->hv", s, k[:, t])  # S^T k
        update = beta[:, t, None] * (v[:, t] - predicted)
        s += k[:, t, :, None] * update[:, None, :]
        out[:, t] = np.einsum("hkv,hk->hv", s, q[:, t])
    return out.transpose(1, 0, 2), s


def _unit_lower_solve(lower, rhs):
    """X with (I + L) X = rhs, L strictly lower [H, C, C], by forward substitution."""
    x = np.empty_like(rhs)
    for i in range(rhs.shape[1]):
        x[:, i] = rhs[:, i] - np.einsum("hj,hjn->hn", lower[:, i, :i], x[:, :i])
    return x


def _chunk(q, k, v, g, beta, s):
    """One chunk of c <= CHUNK tokens, heads first ([H, c, d], g and beta [H, c]), from state s:
    the WY (UT-transform) form. Returns (out [H, c, dv], next state)."""
    c = g.shape[1]
    cum = np.cumsum(g, axis=1)  # G: log of the decay from the chunk's start through token i
    causal = np.tril(np.ones((c, c), bool))  # j <= i
    diff = np.where(causal, cum[:, :, None] - cum[:, None, :], -np.inf)
    decay = np.exp(diff)  # e^(G_i - G_j) for j <= i, else 0
    k_beta = k * beta[:, :, None]
    strict = np.tril(k_beta @ k.transpose(0, 2, 1) * decay, -1)  # beta_i k_i.k_j e^(G_i - G_j), j < i
    new_values = _unit_lower_solve(strict, v * beta[:, :, None])  # U = T (beta V)
    decayed_keys = _unit_lower_solve(strict, k_beta * np.exp(cum)[:, :, None])  # W = T (beta e^G K)
    corrected = new_values - decayed_keys @ s  # V' = U - W S
    intra = (q @ k.transpose(0, 2, 1)) * decay  # causal, diagonal included
    out = (q * np.exp(cum)[:, :, None]) @ s + intra @ corrected
    last = cum[:, -1]
    tail = np.exp(last[:, None] - cum)  # e^(G_last - G_i)
    s = np.exp(last)[:, None, None] * s + (k * tail[:, :, None]).transpose(0, 2, 1) @ corrected
    return out, s


def delta_rule_chunked(q, k, v, g, beta, state=None, chunk=CHUNK):
    """The same result as delta_rule_recurrent, in chunks of `chunk` tokens (the last may be
    shorter; transformers pads it with tokens that change nothing)."""
    q, k, v = _heads(q, k, v)
    g, beta = np.asarray(g, np.float64).T, np.asarray(beta, np.float64).T
    s = _initial(state, v.shape[0], q.shape[2], v.shape[2])
    out = np.empty_like(v)
    for start in range(0, v.shape[1], chunk):
        part = slice(start, start + chunk)
        out[:, part], s = _chunk(q[:, part], k[:, part], v[:, part], g[:, part], beta[:, part], s)
    return out.transpose(1, 0, 2), s


def conv(x, weight, window=None):
    """The causal depthwise convolution, before its SiLU: x [T, C], weight [C, K] (conv1d's
    [C, 1, K] squeezed), window [K - 1, C] (the previous inputs, oldest first; zeros for a new
    sequence). y[t, c] = sum_j weight[c, j] * in[t - K + 1 + j, c] over the inputs preceded by the
    window. Returns (y [T, C], the next window: the last K - 1 inputs)."""
    x, weight = np.asarray(x, np.float64), np.asarray(weight, np.float64)
    taps = weight.shape[1]
    if window is None:
        window = np.zeros((taps - 1, x.shape[1]))
    full = np.concatenate([np.asarray(window, np.float64), x], axis=0)
    y = np.zeros_like(x)
    for j in range(taps):
        y += weight[:, j] * full[j:j + x.shape[0]]
    return y, full[full.shape[0] - (taps - 1):].copy()


def conv_silu(x, weight, window=None):
    """silu(conv(...)): the mixer's convolution as transformers runs it (activation "silu")."""
    y, window = conv(x, weight, window)
    return silu(y), window


def gated_norm(x, z, weight, eps):
    """Qwen3NextRMSNormGated per row of x [N, d]: weight * x / rms(x) * silu(z), a plain (not
    zero-centred) RMSNorm gated by z."""
    x = np.asarray(x, np.float64)
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return np.asarray(weight, np.float64) * (x / rms) * silu(z)


def split_qkv(qkv, k_heads, v_heads, k_dim, v_dim):
    """The conv's output [T, 2 k_heads k_dim + v_heads v_dim] as q, k [T, k_heads, k_dim] and
    v [T, v_heads, v_dim] (in_proj_qkv's order: q of every key head, then k, then v)."""
    qkv = np.asarray(qkv, np.float64)
    t, kw = qkv.shape[0], k_heads * k_dim
    return (qkv[:, :kw].reshape(t, k_heads, k_dim), qkv[:, kw:2 * kw].reshape(t, k_heads, k_dim),
            qkv[:, 2 * kw:].reshape(t, v_heads, v_dim))
