# SPDX-License-Identifier: MIT OR Apache-2.0
"""A whole decoder in float64, written from transformers' modeling code for the Llama-family
models (Llama, Mistral/Mixtral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE): embedding, per layer
RMSNorm -> attention (GQA, optional q/k/v bias, Qwen3's per-head q/k RMSNorm, RoPE) -> residual
-> RMSNorm -> FFN (expected.py's, dense or MoE, any weight format) -> residual, final RMSNorm, the
logits projection (tied to the embedding when the config says so), and greedy decoding.

`rounded=True` stores every tensor where transformers stores a bf16 one (projections, norm
outputs, cos/sin, the rotated q/k, softmax probabilities, attention output, residual sums,
logits) and computes everything between in float64; `rounded=False` is the exact math, which
tests/checkpoints/validate_decoder_reference.py matches against transformers run in float64.

RoPE as transformers computes it: inv_freq in f32 from rope_theta (and rope_scaling: `default`,
`llama3`, `yarn`; any other type is refused by name), the angle position * inv_freq, its cos and
sin and their product with the attention factor in f32 (in every mode: transformers does so in
float64 models too), then bf16; the rotate-half pairing (i, i + head_dim/2).
"""
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from numerics import round_bf16

WeightFn = Callable[[str], np.ndarray]    # module or tensor name -> float64 values
FfnFn = Callable[[int, np.ndarray], np.ndarray]  # layer, bf16-valued input [m, H] -> output [m, H]

ROPE_TYPES = ("default", "llama3", "yarn")


def rope_parameters(config: Dict) -> Dict:
    """rope_scaling (transformers 4) or rope_parameters (transformers 5), with rope_theta."""
    p = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    p.setdefault("rope_theta", config.get("rope_theta", 10000.0))
    p["rope_type"] = p.get("rope_type", p.get("type", "default"))
    return p


def inv_freq(config: Dict, head_dim: int) -> Tuple[np.ndarray, float]:
    """(inv_freq f32 [head_dim / 2], attention factor) of the config's RoPE."""
    p = rope_parameters(config)
    kind, base = p["rope_type"], float(p["rope_theta"])
    if kind not in ROPE_TYPES:
        raise ValueError(f"rope_type '{kind}' is not one this reference computes ({', '.join(ROPE_TYPES)})")
    f32 = np.float32
    exponents = (np.arange(0, head_dim, 2).astype(f32) / f32(head_dim)).astype(f32)
    pos_freqs = np.power(f32(base), exponents).astype(f32)
    freq = (f32(1.0) / pos_freqs).astype(f32)
    if kind == "default":
        return freq, 1.0
    # transformers 5: a top-level original_max_position_embeddings first, else the rope's, else
    # max_position_embeddings; yarn's factor, when absent, is the ratio of the context lengths.
    original = float(config.get("original_max_position_embeddings") or p.get("original_max_position_embeddings")
                     or config["max_position_embeddings"])
    factor = float(p["factor"]) if p.get("factor") is not None else config["max_position_embeddings"] / original
    if kind == "llama3":
        low_wavelen = original / float(p["low_freq_factor"])
        high_wavelen = original / float(p["high_freq_factor"])
        wavelen = (2 * math.pi / freq).astype(f32)
        scaled = np.where(wavelen > low_wavelen, freq / f32(factor), freq).astype(f32)
        smooth = ((original / wavelen - float(p["low_freq_factor"])) /
                  (float(p["high_freq_factor"]) - float(p["low_freq_factor"]))).astype(f32)
        smoothed = ((1 - smooth) * scaled / f32(factor) + smooth * scaled).astype(f32)
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, scaled).astype(f32), 1.0

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = p.get("attention_factor")
    if attention is None:
        if p.get("mscale") and p.get("mscale_all_dim"):
            attention = mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"])
        else:
            attention = mscale(factor)
    beta_fast, beta_slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return head_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(head_dim // 2, dtype=f32) - low) / (high - low), 0, 1).astype(f32)
    extrapolation = (1 - ramp).astype(f32)
    interpolated = (f32(1.0) / (f32(factor) * pos_freqs)).astype(f32)
    return (interpolated * (1 - extrapolation) + freq * extrapolation).astype(f32), float(attention)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float, rounded: bool) -> np.ndarray:
    """weight * (x / sqrt(mean(x^2) + eps)), the normalised x stored bf16 before the product."""
    h = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    if not rounded:
        return weight * h
    return round_bf16(weight * round_bf16(h))


class DecoderReference:
    def __init__(self, config: Dict, weight: WeightFn, ffn: FfnFn, rounded: bool = True,
                 tensor: Optional[WeightFn] = None):
        """weight(module): the float64 [N, K] weight of a linear module; tensor(name): any other
        stored tensor (norm weights, biases, the embedding) as float64; ffn(layer, x)."""
        self.c = config
        self.weight = weight
        self.tensor = tensor or weight
        self.ffn = ffn
        self.rounded = rounded
        self.heads = config["num_attention_heads"]
        self.kv_heads = config.get("num_key_value_heads") or self.heads
        self.head_dim = config.get("head_dim") or config["hidden_size"] // self.heads
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.freq, self.attention_factor = inv_freq(config, self.head_dim)
        self.qk_norm = config["model_type"].startswith("qwen3")
        # Qwen2 biases q, k and v (never o); the others bias all four when attention_bias says so.
        qwen2 = config["model_type"].startswith("qwen2")
        self.qkv_bias = qwen2 or bool(config.get("attention_bias"))
        self.o_bias = not qwen2 and bool(config.get("attention_bias"))

    def _r(self, v: np.ndarray) -> np.ndarray:
        return round_bf16(v) if self.rounded else v

    def _linear(self, module: str, x: np.ndarray, bias: bool = False) -> np.ndarray:
        y = x @ self.weight(module).T
        if bias:
            y = y + self.tensor(module + ".bias")
        return self._r(y)

    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """x [m, heads, head_dim] rotated at positions [m]."""
        # transformers computes the angle, its cos and sin and the attention factor's product in
        # f32 whatever the model's dtype, then stores cos and sin in it (bf16).
        angle = (positions.astype(np.float32)[:, None] * self.freq[None, :]).astype(np.float32)
        angle = np.concatenate([angle, angle], axis=-1)
        factor = np.float32(self.attention_factor)
        cos = (np.cos(angle) * factor).astype(np.float32).astype(np.float64)
        sin = (np.sin(angle) * factor).astype(np.float32).astype(np.float64)
        cos, sin = self._r(cos), self._r(sin)
        half = self.head_dim // 2
        rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return self._r(self._r(x * cos[:, None, :]) + self._r(rotated * sin[:, None, :]))

    def qkv(self, layer: int, x: np.ndarray, positions: np.ndarray):
        """The rotated q [m, heads, d], k [m, kv_heads, d] and v [m, kv_heads, d] of normalised x."""
        p = f"model.layers.{layer}.self_attn."
        m = x.shape[0]
        q = self._linear(p + "q_proj", x, self.qkv_bias).reshape(m, self.heads, self.head_dim)
        k = self._linear(p + "k_proj", x, self.qkv_bias).reshape(m, self.kv_heads, self.head_dim)
        v = self._linear(p + "v_proj", x, self.qkv_bias).reshape(m, self.kv_heads, self.head_dim)
        if self.qk_norm:
            q = rms_norm(q, self.tensor(p + "q_norm.weight"), self.eps, self.rounded)
            k = rms_norm(k, self.tensor(p + "k_norm.weight"), self.eps, self.rounded)
        return self.rope(q, positions), self.rope(k, positions), v

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, q_positions: np.ndarray) -> np.ndarray:
        """q [m, heads, d] at q_positions against the whole sequence's k, v [t, kv_heads, d]
        (positions 0..t-1), causal: query i sees keys 0..q_positions[i]."""
        group = self.heads // self.kv_heads
        kh = np.repeat(k, group, axis=1)  # [t, heads, d]
        vh = np.repeat(v, group, axis=1)
        scores = self._r(np.einsum("mhd,thd->hmt", q, kh) / math.sqrt(self.head_dim))
        mask = np.arange(k.shape[0])[None, :] > q_positions[:, None]  # [m, t]
        scores = np.where(mask[None, :, :], -np.inf, scores)
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p = self._r(p / p.sum(axis=-1, keepdims=True))
        return self._r(np.einsum("hmt,thd->mhd", p, vh))

    def layer(self, layer: int, h: np.ndarray, positions: np.ndarray,
              past: Optional[Tuple[np.ndarray, np.ndarray]] = None):
        """One decoder layer on h [m, H] at positions [m] after `past` (k, v of positions
        0..past-1, or None). Returns (output [m, H], (k, v) of the whole sequence)."""
        p = f"model.layers.{layer}."
        x = rms_norm(h, self.tensor(p + "input_layernorm.weight"), self.eps, self.rounded)
        q, k, v = self.qkv(layer, x, positions)
        if past is not None:
            k, v = np.concatenate([past[0], k]), np.concatenate([past[1], v])
        a = self.attend(q, k, v, positions).reshape(h.shape[0], self.heads * self.head_dim)
        h = self._r(h + self._linear(p + "self_attn.o_proj", a, self.o_bias))
        x = rms_norm(h, self.tensor(p + "post_attention_layernorm.weight"), self.eps, self.rounded)
        return self._r(h + self._r(self.ffn(layer, x))), (k, v)

    def embed(self, ids: Sequence[int]) -> np.ndarray:
        return self.tensor("model.embed_tokens.weight")[np.asarray(ids)]

    def logits(self, h: np.ndarray) -> np.ndarray:
        x = rms_norm(h, self.tensor("model.norm.weight"), self.eps, self.rounded)
        head = "model.embed_tokens" if self.c.get("tie_word_embeddings") else "lm_head"
        return self._r(x @ self.tensor(head + ".weight").T)

    def forward(self, ids: Sequence[int]) -> np.ndarray:
        """The logits [len(ids), vocab] of a prompt."""
        h = self.embed(ids)
        positions = np.arange(len(ids))
        for layer in range(self.c["num_hidden_layers"]):
            h, _ = self.layer(layer, h, positions)
        return self.logits(h)

    def greedy(self, prompt: Sequence[int], new_tokens: int) -> Tuple[List[int], np.ndarray]:
        """Greedy decoding (the first of equal maxima, as torch.argmax): the new ids and the logits
        [new_tokens, vocab] each was chosen from. Recomputes the whole sequence per step: the KV
        cache of a real decoder is an optimisation of exactly this."""
        ids, chosen_from = list(prompt), []
        for _ in range(new_tokens):
            last = self.forward(ids)[-1]
            chosen_from.append(last)
            ids.append(int(np.argmax(last)))
        return ids[len(prompt):], np.stack(chosen_from)
