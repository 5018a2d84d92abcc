# SPDX-License-Identifier: MIT OR Apache-2.0
"""What a decoder must produce, from a checkpoint directory alone: decoder_reference.py (float64
with transformers' bf16 rounding points) with expected.py's FFN, driven the way the CLI's
`run --block` and `generate` describe their inputs (sequences, steps, positions), and the budget
within which an implementation that accumulates in f32 must agree with it.

The budget (docs/layers.md, "The decoder's budget"). A hidden-state element y of reference r
passes when

    |y - r| <= 2^-6 |r| + B * (rms(o) + rms(f)),     B = 2^-4 (decoder block)

with rms(o), rms(f) the RMS of the row's attention (o_proj) and FFN outputs in the reference: two
bf16 ulps of the element (the residual adds round twice) plus a share of what the two sublayers
added (the residual stream itself passes exactly). `--block attention` (no residual):
|y - r| <= 2^-6 |r| + B * rms(r). Logits: |l - r| <= 2^-6 |r| + C * rms(r) of the position's
logits, C = 2^-3.

Why that much: an implementation that sums in f32 and keeps attention scores in f32 (sdpa, flash
attention, metrale's attn kernels) differs from transformers' eager bf16 path mostly because the
eager path rounds the scores to bf16, which moves each probability by up to |score| * 2^-9; the
rest are bf16 intermediates (projections, norms, RoPE) that f32 sums round the other way now
and then, one ulp each. F32Implementation does exactly that; on these models it uses at most
0.53 of the block budget, 0.25 of the attention budget and 0.40 of the logits budget (Qwen2 with
its successor FFN, whose response is quadratic in its input, is the most sensitive), and
transformers 5.24 itself in bf16, eager or sdpa, at most 0.40 of the logits budget
(validate_decoder_budget.py). transformers' own bf16 run sits 0.04-0.06 RMS from its exact one
(validate_decoder_reference.py): C is twice that.

Why not more: every perturbation below fails by 9-80 times its budget in some case
(run_decoder_tests.py --self-test prints each): wrong RoPE pairing, decode rows rotated one
position late, llama3 scaling ignored, q/k norm missing, a q/k/v bias missing, the causal mask
one row off either way, grouped heads mapped wrongly, the softmax scale wrong, KV read from
another sequence in a batched decode; and F32Implementation must pass everywhere.
"""
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import decoder_reference
import decoders
import expected
import models
from decoder_reference import rms_norm
from numerics import bf16_bits, round_bf16

OUTPUT_ULPS = 2.0 ** -6   # two bf16 ulps of the element itself
BLOCK = 2.0 ** -4         # B: of the RMS a sublayer added
LOGITS = 2.0 ** -3        # C: of the logits' RMS
ROUTING_TIE = 2.0 ** -6   # top-k gap, relative to sum |x r|, within which routing may go either way

PERTURBATIONS = {
    "rope-pairing": "RoPE pairs (2i, 2i+1) instead of (i, i + head_dim/2)",
    "decode-position+1": "decode rows (one token after a prefix) rotated at position + 1",
    "rope-scaling-ignored": "llama3 rope_scaling ignored (plain inv_freq)",
    "yarn-context-ratio": "yarn's factor taken from max_position_embeddings / original (transformers 4's rule)",
    "qk-norm-missing": "Qwen3's q_norm / k_norm skipped",
    "q-bias-missing": "q_proj's bias skipped",
    "k-bias-missing": "k_proj's bias skipped",
    "v-bias-missing": "v_proj's bias skipped",
    "mask+1": "causal mask one row late (row i sees i + 1)",
    "mask-1": "causal mask one row early (row i sees up to i - 1; row 0 itself)",
    "gqa-interleaved": "q head h reads kv head h % kv_heads instead of h / (heads / kv_heads)",
    "softmax-scale": "scores scaled by 1/head_dim instead of 1/sqrt(head_dim)",
    "kv-wrong-sequence": "a batched decode row attends to the next sequence's cache",
}


def applies(perturbation: str, config: Dict) -> bool:
    arch = config["model_type"]
    if perturbation == "qk-norm-missing":
        return arch.startswith("qwen3")
    if perturbation.endswith("-bias-missing"):
        return arch.startswith("qwen2")
    if perturbation == "rope-scaling-ignored":
        return decoder_reference.rope_parameters(config)["rope_type"] != "default"
    if perturbation == "yarn-context-ratio":
        return decoder_reference.rope_parameters(config)["rope_type"] == "yarn"
    return True


class Reference(decoder_reference.DecoderReference):
    """The rounded reference of a checkpoint (expected.Checkpoint), optionally perturbed.
    Records the top-k routing gap of every row its MoE layers route (routing_gaps)."""

    def __init__(self, ck: expected.Checkpoint, perturbation: Optional[str] = None):
        tensor = lambda n: decoders.float_values(ck.tensor(n))  # noqa: E731
        super().__init__(ck.config, ck.weight, self._ffn, rounded=True, tensor=tensor)
        self.ck = ck
        self.perturbation = perturbation
        self.routing_gaps: List[float] = []
        if perturbation == "qk-norm-missing":
            self.qk_norm = False
        if perturbation == "rope-scaling-ignored":
            plain = {k: v for k, v in ck.config.items() if k not in ("rope_scaling", "rope_parameters")}
            self.freq, self.attention_factor = decoder_reference.inv_freq(plain, self.head_dim)
        if perturbation == "yarn-context-ratio":
            ratio = dict(ck.config)
            ratio["rope_scaling"] = {k: v for k, v in decoder_reference.rope_parameters(ck.config).items() if k != "factor"}
            self.freq, self.attention_factor = decoder_reference.inv_freq(ratio, self.head_dim)

    # ---- the FFN: expected.py's contract, with the routing gap recorded ------------------------
    def _ffn(self, layer: int, x: np.ndarray) -> np.ndarray:
        self._record_routing(layer, x)
        return self.ffn_value(layer, x)

    def ffn_value(self, layer: int, x: np.ndarray) -> np.ndarray:
        return expected.expected_output(self.ck, layer, bf16_bits(x)).value

    def _record_routing(self, layer: int, x: np.ndarray) -> None:
        ffn = models.ffn_layout(self.c, layer, names=self.ck.tensors.keys())
        if ffn.kind != "moe":
            return
        router = self.ck.weight(ffn.router)
        logits = x @ router.T
        top = np.sort(logits, axis=1)[:, ::-1]
        scale = np.abs(x) @ np.abs(router).T
        gap = (top[:, ffn.top_k - 1] - top[:, ffn.top_k]) / scale.max(axis=1)
        self.routing_gaps.extend(gap.tolist())

    def routing_near_ties(self) -> int:
        return int(sum(g <= ROUTING_TIE for g in self.routing_gaps))

    # ---- perturbations ---------------------------------------------------------------------------
    def _linear(self, module: str, x: np.ndarray, bias: bool = False) -> np.ndarray:
        p = self.perturbation or ""
        if p.endswith("-bias-missing") and module.endswith(p[0] + "_proj"):
            bias = False
        return super()._linear(module, x, bias)

    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        if self.perturbation == "rope-pairing":  # rotate pairs (2i, 2i+1) with frequency i
            order = np.concatenate([np.arange(0, self.head_dim, 2), np.arange(1, self.head_dim, 2)])
            return super().rope(x[..., order], positions)[..., np.argsort(order)]
        return super().rope(x, positions)

    def attend(self, q, k, v, q_positions):
        p = self.perturbation
        if p == "mask+1":
            return super().attend(q, k, v, q_positions + 1)
        if p == "mask-1":
            return super().attend(q, k, v, np.maximum(q_positions - 1, 0))
        if p == "softmax-scale":
            return super().attend(q / math.sqrt(self.head_dim), k, v, q_positions)
        if p == "gqa-interleaved":  # q head j reads kv head j % kv_heads
            group = self.heads // self.kv_heads
            j = np.arange(self.heads)
            feed = (j // group) + self.kv_heads * (j % group)  # slot j (reads kv j // group) takes q head feed[j]
            out = super().attend(q[:, feed], k, v, q_positions)
            back = np.empty_like(out)
            back[:, feed] = out
            return back
        return super().attend(q, k, v, q_positions)


class F32Implementation(Reference):
    """The decoder as an f32 kernel computes it (docs/kernels.md): projections and FFN summed in
    f32 with bf16 outputs, attention scores and softmax in f32 without rounding the scores or the
    probabilities, the output rounded once. Everything the contracts round, it rounds."""

    def __init__(self, ck: expected.Checkpoint):
        super().__init__(ck)
        self._f32: Dict[str, np.ndarray] = {}

    def _w32(self, module: str) -> np.ndarray:
        if module not in self._f32:
            self._f32[module] = self.ck.weight(module).astype(np.float32)
        return self._f32[module]

    def _mm(self, x: np.ndarray, module: str) -> np.ndarray:
        return (x.astype(np.float32) @ self._w32(module).T).astype(np.float64)

    def _linear(self, module: str, x: np.ndarray, bias: bool = False) -> np.ndarray:
        y = self._mm(x, module)
        if bias:
            y = (y.astype(np.float32) + self.tensor(module + ".bias").astype(np.float32)).astype(np.float64)
        return round_bf16(y)

    def attend(self, q, k, v, q_positions):
        group = self.heads // self.kv_heads
        kh = np.repeat(k, group, axis=1).astype(np.float32)
        vh = np.repeat(v, group, axis=1).astype(np.float32)
        scores = np.einsum("mhd,thd->hmt", q.astype(np.float32), kh) * np.float32(1 / math.sqrt(self.head_dim))
        mask = np.arange(k.shape[0])[None, :] > q_positions[:, None]
        scores = np.where(mask[None, :, :], np.float32(-np.inf), scores)
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p = p / p.sum(axis=-1, keepdims=True)
        return round_bf16(np.einsum("hmt,thd->mhd", p, vh).astype(np.float64))

    def _dense(self, names, x):
        gate, up, down = names
        g, u = round_bf16(self._mm(x, gate)), round_bf16(self._mm(x, up))
        a = round_bf16((g / (1 + np.exp(-g)) * u).astype(np.float32).astype(np.float64))
        return self._mm(a, down)

    def ffn_value(self, layer: int, x: np.ndarray) -> np.ndarray:
        ffn = models.ffn_layout(self.c, layer, names=self.ck.tensors.keys())
        if ffn.kind == "dense":
            return self._dense(ffn.dense, x)
        logits = self._mm(x, ffn.router)
        ids, weights, _ = expected.route(logits, np.ones_like(logits), ffn.top_k, ffn.renormalize, ffn.scaling)
        weights = weights.astype(np.float32).astype(np.float64)
        out = np.zeros_like(x)
        for e, names in enumerate(ffn.experts):
            rows, slot = np.nonzero(ids == e)
            if rows.size:
                out[rows] += weights[rows, slot][:, None] * round_bf16(self._dense(names, x[rows]))
        return out.astype(np.float32).astype(np.float64)

    def logits(self, h: np.ndarray) -> np.ndarray:
        x = rms_norm(h, self.tensor("model.norm.weight"), self.eps, True)
        head = "model.embed_tokens" if self.c.get("tie_word_embeddings") else "lm_head"
        return round_bf16((x.astype(np.float32) @ self.tensor(head + ".weight").astype(np.float32).T).astype(np.float64))


def make(ck: expected.Checkpoint, variant: Optional[str]) -> Reference:
    """variant None: the reference; "f32": F32Implementation; else a perturbation's name."""
    if variant == "f32":
        return F32Implementation(ck)
    return Reference(ck, variant)


# ---- one block over sequences and steps (metrale run --block) --------------------------------------

def batched_decode_steps(sequence: np.ndarray, step: np.ndarray) -> List[int]:
    """Steps whose rows are one per sequence for several sequences."""
    out = []
    for s in np.unique(step):
        seqs = sequence[step == s]
        if len(seqs) > 1 and len(np.unique(seqs)) == len(seqs):
            out.append(int(s))
    return out


def attention_rows(ref: Reference, layer: int, x: np.ndarray, positions: np.ndarray, sequence: np.ndarray,
                   step: np.ndarray) -> np.ndarray:
    """Attention outputs [m, heads * head_dim] (before o_proj) of normalised rows x: each sequence
    its rows in file order, causal by that order, RoPE at `positions`."""
    if ref.perturbation == "decode-position+1":
        positions = positions + np.isin(step, batched_decode_steps(sequence, step))
    q, k, v = ref.qkv(layer, x, positions)
    out = np.zeros((x.shape[0], ref.heads, ref.head_dim))
    for s in np.unique(sequence):
        rows = np.nonzero(sequence == s)[0]
        out[rows] = ref.attend(q[rows], k[rows], v[rows], np.arange(len(rows)))
    if ref.perturbation == "kv-wrong-sequence":
        for st in batched_decode_steps(sequence, step):
            in_step = np.nonzero(step == st)[0]
            for i, r in enumerate(in_step):
                other = in_step[(i + 1) % len(in_step)]
                cache = np.nonzero((sequence == sequence[other]) & (np.arange(len(step)) <= other))[0]
                out[r] = ref.attend(q[r:r + 1], k[cache], v[cache], np.array([len(cache) - 1]))[0]
    return out.reshape(x.shape[0], ref.heads * ref.head_dim)


def block(ref: Reference, layer: int, kind: str, x: np.ndarray, positions: np.ndarray, sequence: np.ndarray,
          step: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(output [m, H], the budget's per-row scale [m]) of `--block decoder|attention`."""
    o_proj = f"model.layers.{layer}.self_attn.o_proj"
    if kind == "attention":
        y = ref._linear(o_proj, attention_rows(ref, layer, x, positions, sequence, step), ref.o_bias)
        return y, rms_rows(y)
    p = f"model.layers.{layer}."
    n = rms_norm(x, ref.tensor(p + "input_layernorm.weight"), ref.eps, True)
    o = ref._linear(o_proj, attention_rows(ref, layer, n, positions, sequence, step), ref.o_bias)
    h = round_bf16(x + o)
    f = round_bf16(ref.ffn(layer, rms_norm(h, ref.tensor(p + "post_attention_layernorm.weight"), ref.eps, True)))
    return round_bf16(h + f), rms_rows(o) + rms_rows(f)


def rms_rows(y: np.ndarray) -> np.ndarray:
    return np.sqrt(np.mean(y * y, axis=1))


# ---- whole-model sessions (metrale generate) -------------------------------------------------------

class Session:
    """One sequence through the whole model with a KV cache per layer (the same numbers as
    DecoderReference.forward on the whole prefix: every other operation is per row)."""

    def __init__(self, ref: Reference):
        self.ref = ref
        self.past: List[Optional[Tuple[np.ndarray, np.ndarray]]] = [None] * ref.c["num_hidden_layers"]
        self.length = 0

    def extend(self, ids: Sequence[int], read: Optional["Session"] = None) -> np.ndarray:
        """Appends ids; returns their logits [len(ids), vocab]. `read`: attend to that session's
        cache instead of this one's (the kv-wrong-sequence perturbation); the new rows still enter
        this session's cache."""
        ref = self.ref
        h = ref.embed(ids)
        positions = np.arange(self.length, self.length + len(ids))
        if ref.perturbation == "decode-position+1" and len(ids) == 1 and self.length:
            positions = positions + 1  # the mask (keys up to the position) still sees every key
        for layer in range(len(self.past)):
            source = (read or self).past[layer]
            h, kv = ref.layer(layer, h, positions, source)
            new = (kv[0][-len(ids):], kv[1][-len(ids):])
            own = self.past[layer]
            self.past[layer] = new if own is None else (np.concatenate([own[0], new[0]]), np.concatenate([own[1], new[1]]))
        self.length += len(ids)
        return ref.logits(h)


def decode(ref: Reference, prompts: Sequence[Sequence[int]], new_tokens: int,
           forced: Optional[Sequence[Sequence[int]]] = None):
    """All prompts prefilled, then one batched step per new token, greedy (the first of equal
    maxima) unless `forced` gives the ids (teacher forcing on another decoder's output).
    Returns (ids [B][N], [prompt logits [L_b, V]], [logits each id was chosen from [N, V]])."""
    sessions = [Session(ref) for _ in prompts]
    prompt_logits = [s.extend(p) for s, p in zip(sessions, prompts)]
    chosen_from = [[pl[-1]] for pl in prompt_logits]
    pick = lambda b, j: int(forced[b][j]) if forced is not None else int(np.argmax(chosen_from[b][j]))  # noqa: E731
    ids = [[pick(b, 0)] for b in range(len(prompts))]
    wrong = ref.perturbation == "kv-wrong-sequence" and len(prompts) > 1
    for j in range(1, new_tokens):
        before = [(list(s.past), s.length) for s in sessions]
        for b, s in enumerate(sessions):
            read = None
            if wrong:  # attend to the next sequence's cache as it stood before this step
                read = Session(ref)
                read.past, read.length = before[(b + 1) % len(sessions)]
            chosen_from[b].append(s.extend([ids[b][j - 1]], read)[-1])
            ids[b].append(pick(b, j))
    return ids, prompt_logits, [np.stack(c) for c in chosen_from]


# ---- the comparison ------------------------------------------------------------------------------

@dataclass
class Verdict:
    checked: int
    over: int
    worst_ratio: float
    max_abs: float
    worst: Optional[Tuple[int, int, float, float, float]]  # row, col, got, want, bound

    @property
    def passed(self) -> bool:
        return self.over == 0 and self.checked > 0

    def describe(self) -> str:
        text = (f"worst {self.worst_ratio:.3g} of budget, max abs err {self.max_abs:.3g}, "
                f"{self.over}/{self.checked} over")
        if not self.passed and self.worst:
            r, c, got, want, bound = self.worst
            text += f"; worst at [{r}, {c}]: got {got:.6g}, want {want:.6g}, budget {bound:.3g}"
        return text


def bound(want: np.ndarray, row_scale: np.ndarray, fraction: float) -> np.ndarray:
    return OUTPUT_ULPS * np.abs(want) + fraction * row_scale[:, None]


def compare(got: np.ndarray, want: np.ndarray, allowed: np.ndarray, rows: Optional[np.ndarray] = None) -> Verdict:
    """got, want, allowed [m, n]; rows: the rows to check (default all). NaN always fails."""
    keep = np.ones(got.shape[0], dtype=bool) if rows is None else rows
    diff = np.abs(got - want)[keep]
    b = allowed[keep]
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(np.isfinite(diff), diff / np.maximum(b, 1e-300), np.inf)
    over = int((~(diff <= b)).sum())
    worst = None
    if ratio.size:
        r, c = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        row = int(np.nonzero(keep)[0][r])
        worst = (row, int(c), float(got[row, c]), float(want[row, c]), float(b[r, c]))
    finite = diff[np.isfinite(diff)]
    return Verdict(int(diff.size), over, float(ratio.max()) if ratio.size else 0.0,
                   float(finite.max()) if finite.size else 0.0, worst)


def logits_bound(want: np.ndarray) -> np.ndarray:
    return bound(want, rms_rows(want), LOGITS)


def top2_margin(logits: np.ndarray) -> Tuple[int, float, float]:
    """(argmax, top-2 margin, the margin's share of the budget: margin / (budget of top 1 + budget
    of top 2); <= 1 is a near-tie, where either order is within the budget)."""
    order = np.argsort(-logits, kind="stable")
    a, b = order[0], order[1]
    margin = float(logits[a] - logits[b])
    allowed = logits_bound(logits[None, :])[0]
    return int(a), margin, margin / float(allowed[a] + allowed[b])
