# SPDX-License-Identifier: MIT OR Apache-2.0
"""The output one decoder layer's FFN must produce, computed in float64 from the checkpoint
directory alone (config.json, the quantization config, the safetensors files) with each tool's
own dequantization (decoders.py), and the per-element budget of docs/layers.md ("The reference
and its tolerance").

The FFN contract: y = down(act(gate(x)) * up(x)); the gate and up outputs, the act output and
(MoE) each expert's output are rounded to bf16 as the kernels store them; the final output is
exact. MoE: router logits from the stored router weights and the bf16 inputs in float64, softmax,
top-k (ties to the lower id), renormalised when norm_topk_prob, times routed_scaling_factor
(DeepSeek), the shared expert added with weight sigmoid(x . g) (Qwen2-MoE) or 1 (DeepSeek).
"""
import json
import os
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np

import decoders
import models
from numerics import bf16_ulp, bf16_value, e4m3_codes, e4m3_value, round_bf16
from safetensors_np import Tensor, load_checkpoint

REL = 2.0 ** -7     # two bf16 ulps of the output
SCALE = 2.0 ** -12  # f32 accumulation, per unit of sum |x w|
WEIGHT = 2.0 ** -16  # f32 routing weights
TIE = 2.0 ** -14    # k-th vs (k+1)-th logit closer than this (relative): routing may go either way
FLIPS = 4.0         # bf16 intermediates whose rounding may fall the other way in f32


@dataclass
class Expected:
    value: np.ndarray     # [m, H]
    bound: np.ndarray     # [m, H] allowed |y - value|
    excluded: np.ndarray  # [m] bool: near-tie routing, left out of the check


def read_quant_config(directory: str, config: Dict) -> Dict:
    if "quantization_config" in config:
        return config["quantization_config"]
    path = os.path.join(directory, "quantize_config.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {}


class Checkpoint:
    """activations "bf16" (the W·A16 contract, the default) or "format": quantize each projection's
    inputs as the checkpoint's config asks (activation_scheme), for kernels that do."""

    def __init__(self, directory: str, activations: str = "bf16"):
        with open(os.path.join(directory, "config.json")) as f:
            self.config = json.load(f)
        self.qcfg = read_quant_config(directory, self.config)
        self.activations = activation_scheme(self.qcfg) if activations == "format" else "bf16"
        self.arithmetic = activation_arithmetic(self.qcfg)
        self.tensors = split_fused_experts(load_checkpoint(directory))
        self._cache: Dict[str, np.ndarray] = {}

    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]

    def input_scale(self, module: str) -> Optional[float]:
        """The module's static activation scale (input_scale, as stored), when it has one."""
        t = self.tensors.get(f"{module}.input_scale")
        return None if t is None else float(decoders.float_values(t).reshape(-1)[0])

    def weight(self, module: str) -> np.ndarray:
        """The float64 [N, K] weight of a linear module, as its tool dequantizes it."""
        if module not in self._cache:
            self._cache[module] = decoders.decode(lambda suffix: self.tensors[f"{module}.{suffix}"], self.qcfg)
        return self._cache[module]


def split_fused_experts(tensors: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """transformers 5's fused expert tensors (<block>experts.gate_up_proj [E, 2I, H]: gate rows,
    then up rows; experts.down_proj [E, H, I]; block-FP8 scales `<name>_scale_inv` [E, rows/128,
    cols/128]) as the per-expert modules they hold (experts.E.{gate,up,down}_proj.weight and
    .weight_scale_inv), which the tool's dequantization then reads one by one."""
    out = dict(tensors)
    for name in [n for n in tensors if n.endswith(".experts.gate_up_proj")]:
        experts = name[: -len("gate_up_proj")]
        gate_up, gate_up_s = out.pop(name), out.pop(name + "_scale_inv")
        down, down_s = out.pop(experts + "down_proj"), out.pop(experts + "down_proj_scale_inv")
        inter = gate_up.data.shape[1] // 2
        assert inter % 128 == 0, "a 128-row scale block would straddle gate and up"
        for e in range(gate_up.data.shape[0]):
            parts = {"gate_proj": (gate_up.data[e, :inter], gate_up_s.data[e, : inter // 128]),
                     "up_proj": (gate_up.data[e, inter:], gate_up_s.data[e, inter // 128:]),
                     "down_proj": (down.data[e], down_s.data[e])}
            for proj, (w, sc) in parts.items():
                out[f"{experts}{e}.{proj}.weight"] = Tensor(gate_up.dtype, w)
                out[f"{experts}{e}.{proj}.weight_scale_inv"] = Tensor(gate_up_s.dtype, sc)
    return out


def activation_scheme(qcfg: Dict) -> str:
    """The activation quantization a checkpoint's config asks for: "bf16" (none), "int8-token",
    "fp8-token" (compressed-tensors dynamic input_activations), "int8-static" / "fp8-static" (static
    per-tensor scales: each module's input_scale) or "fp8-group128" (block FP8)."""
    if qcfg.get("quant_method") == "fp8" and qcfg.get("activation_scheme") == "dynamic":
        return "fp8-group128"
    if qcfg.get("quant_method") == "compressed-tensors":
        acts = list(qcfg["config_groups"].values())[0].get("input_activations")
        if acts and not acts.get("dynamic") and acts.get("strategy") == "tensor":
            return "int8-static" if acts["type"] == "int" else "fp8-static"
        if acts and acts.get("dynamic") and acts.get("strategy") == "token":
            return "int8-token" if acts["type"] == "int" else "fp8-token"
        if acts and acts.get("dynamic") and acts.get("strategy") == "group" and acts["type"] == "float":
            return "fp8-group128"
    return "bf16"


def activation_arithmetic(qcfg: Dict) -> str:
    """How the tool that runs the checkpoint computes activation scales and codes: "bf16" for
    compressed-tensors (torch in the model's dtype: scale max|x| / 127.5 (int8, (q_max - q_min) / 2)
    or / 448 rounded to bf16, quotients rounded to bf16, int8 codes -128..127), "f32" for the rest
    (transformers' block-FP8 quantizer: max|x| / 448 and x / s in f32)."""
    return "bf16" if qcfg.get("quant_method") == "compressed-tensors" else "f32"


def _e4m3_step(v: np.ndarray) -> np.ndarray:
    """The spacing of FP8 E4M3 values around v (2^-9 among subnormals)."""
    a = np.abs(v)
    _, e = np.frexp(np.where(a > 0, a, 1.0))
    return np.where(a < 2.0 ** -6, 2.0 ** -9, np.ldexp(1.0, e - 1 - 3))


def quantize_activations(x: np.ndarray, scheme: str, arithmetic: str = "f32",
                         amax: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
    """(the values a kernel multiplies after quantizing x as `scheme` does, the step of each):
    per row (or per 128 columns) a scale and codes rounded to nearest even, in the tool's
    `arithmetic` (activation_arithmetic). `amax` [m, K / width] replaces the blocks' own maxima
    when given. The value is code * scale exactly, as an int8 or FP8 kernel multiplies it
    (compressed-tensors' own fake quantization then rounds it to bf16 too, within 2^-9 of it)."""
    if scheme == "bf16":
        return x, np.zeros_like(x)
    m, k = x.shape
    if scheme.endswith("-static"):  # amax: the stored scale itself; compressed-tensors' bf16 quotient
        int8 = scheme == "int8-static"
        s = np.full((m, k), float(amax))
        v = np.clip(round_bf16(np.float32(x) / np.float32(s)), -128.0 if int8 else -448.0, 127.0 if int8 else 448.0)
        if int8:
            return np.rint(v) * s, s
        return e4m3_value(e4m3_codes(v)) * s, _e4m3_step(v) * s
    width = 128 if scheme == "fp8-group128" else k
    blocks = np.abs(x).reshape(m, k // width, width).max(axis=2) if amax is None else amax
    if arithmetic == "bf16":
        int8 = scheme == "int8-token"
        s = round_bf16(np.float32(blocks) / np.float32(127.5 if int8 else 448.0))
        s = np.repeat(np.maximum(s, 2.0 ** -23), width, axis=1)
        v = np.clip(round_bf16(np.float32(x) / np.float32(s)), -128.0 if int8 else -448.0, 127.0 if int8 else 448.0)
        if int8:
            return np.rint(v) * s, s
        return e4m3_value(e4m3_codes(v)) * s, _e4m3_step(v) * s
    qmax = 127.0 if scheme == "int8-token" else 448.0
    s = np.float32(blocks / qmax).astype(np.float64)
    s = np.repeat(np.where(s > 0, s, 1.0), width, axis=1)
    if scheme == "int8-token":
        return np.clip(np.rint(x / s), -127, 127) * s, s
    v = x / s
    return e4m3_value(e4m3_codes(v)) * s, _e4m3_step(v) * s


def _project(w: np.ndarray, x: np.ndarray, rounded_inputs: bool, scheme: str = "bf16",
             arithmetic: str = "f32", input_scale: Optional[float] = None) -> Tuple[np.ndarray, np.ndarray]:
    """x [m, K] times w [N, K]^T: (value, slack beyond 2^-7 |value|). With an activation scheme
    the inputs are quantized first, and up to FLIPS codes may round the other way in the kernel.
    Rounded (bf16 intermediate) inputs may also have their largest element one bf16 ulp away in
    the kernel, which moves that row's scale and with it any number of codes: the slack covers
    the projection under either neighbouring maximum."""
    static = scheme.endswith("-static")
    xq, step = quantize_activations(x, scheme, arithmetic, input_scale if static else None)
    value = xq @ w.T
    slack = SCALE * (np.abs(xq) @ np.abs(w).T)
    if rounded_inputs:
        flip = (np.abs(w)[None, :, :] * bf16_ulp(x)[:, None, :]).max(axis=2)
        slack = slack + FLIPS * flip
    if scheme != "bf16":
        slack = slack + FLIPS * (np.abs(w)[None, :, :] * step[:, None, :]).max(axis=2)
        if rounded_inputs and not static:  # a stored scale does not move with the row maximum
            m, k = x.shape
            width = 128 if scheme == "fp8-group128" else k
            amax = np.abs(x).reshape(m, k // width, width).max(axis=2)
            moved = [np.abs(quantize_activations(x, scheme, arithmetic, a)[0] @ w.T - value)
                     for a in (amax - bf16_ulp(amax), amax + bf16_ulp(amax))]
            slack = slack + np.maximum(*moved)
    return value, slack


def _silu(g: np.ndarray) -> np.ndarray:
    return g / (1.0 + np.exp(-g))


def dense(ck: Checkpoint, names, x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    gate, up, down = (ck.weight(n) for n in names)
    s = [ck.input_scale(n) for n in names]
    g = round_bf16(_project(gate, x, False, ck.activations, ck.arithmetic, s[0])[0])
    u = round_bf16(_project(up, x, False, ck.activations, ck.arithmetic, s[1])[0])
    a = round_bf16(_silu(g) * u)
    return _project(down, a, True, ck.activations, ck.arithmetic, s[2])


def route(logits: np.ndarray, scale: np.ndarray, k: int, renormalize: bool, scaling: float):
    """ids [m, k], weights [m, k], ambiguous [m]: softmax over all experts, the k largest (ties to
    the lower id), renormalised over the k when asked, times the routed scaling factor."""
    m, experts = logits.shape
    order = np.argsort(-logits, axis=1, kind="stable")
    ids = order[:, :k]
    top = logits.max(axis=1, keepdims=True)
    p = np.exp(logits - top)
    p /= p.sum(axis=1, keepdims=True)
    weights = np.take_along_axis(p, ids, axis=1)
    if renormalize:
        weights = weights / weights.sum(axis=1, keepdims=True)
    weights = weights * scaling
    ambiguous = np.zeros(m, dtype=bool)
    if k < experts:
        rows = np.arange(m)
        inside, outside = order[:, k - 1], order[:, k]
        gap = logits[rows, inside] - logits[rows, outside]
        s = np.maximum(scale[rows, inside], scale[rows, outside])
        ambiguous = (gap > 0) & (gap <= TIE * s)
    return ids, weights, ambiguous


def moe(ck: Checkpoint, ffn: models.Ffn, x: np.ndarray) -> Expected:
    m, H = x.shape
    router = ck.weight(ffn.router)  # float as stored, or dequantized (GPTQModel 4.x quantizes it)
    logits = x @ router.T
    ids, weights, ambiguous = route(logits, np.abs(x) @ np.abs(router).T, ffn.top_k, ffn.renormalize, ffn.scaling)
    value = np.zeros((m, H))
    bound = np.zeros((m, H))
    magnitude = np.zeros((m, H))

    def accumulate(rows, w, v, slack):
        e = round_bf16(v)  # expert outputs are stored bf16
        value[rows] += w[:, None] * e
        magnitude[rows] += np.abs(w[:, None] * e)
        bound[rows] += np.abs(w)[:, None] * (2 * bf16_ulp(e) + slack)

    for e, names in enumerate(ffn.experts):
        rows, slot = np.nonzero(ids == e)
        if rows.size:
            v, slack = dense(ck, names, x[rows])
            accumulate(rows, weights[rows, slot], v, slack)
    if ffn.shared:
        v, slack = dense(ck, ffn.shared, x)
        gate = np.ones(m)
        if ffn.shared_gate:
            g = decoders.float_values(ck.tensor(ffn.shared_gate + ".weight"))
            gate = 1.0 / (1.0 + np.exp(-(x @ g.T)[:, 0]))
        accumulate(np.arange(m), gate, v, slack)
    bound += REL * np.abs(value) + WEIGHT * magnitude
    return Expected(value, bound, ambiguous)


def expected_output(ck: Checkpoint, layer: int, x_bf16: np.ndarray) -> Expected:
    """x_bf16: the bf16 bit patterns [m, H] the layer runs."""
    x = bf16_value(x_bf16)
    ffn = models.ffn_layout(ck.config, layer, names=ck.tensors.keys())
    if ffn.kind == "dense":
        value, slack = dense(ck, ffn.dense, x)
        return Expected(value, REL * np.abs(value) + slack, np.zeros(x.shape[0], dtype=bool))
    return moe(ck, ffn, x)


@dataclass
class Verdict:
    checked: int
    violations: int
    excluded: int
    worst_ratio: float
    max_abs: float
    worst: Optional[Tuple[int, int, float, float, float]]  # row, col, got, want, bound

    @property
    def passed(self) -> bool:
        return self.violations == 0 and self.checked > 0


def compare(y: np.ndarray, want: Expected) -> Verdict:
    """y: float64 [m, H] from the bf16 output. NaN or infinity always violates."""
    keep = ~want.excluded
    diff = np.abs(y - want.value)[keep]
    bound = want.bound[keep]
    bad = ~(diff <= bound)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, diff / bound, np.where(diff > 0, np.inf, 0.0))
    ratio = np.where(np.isfinite(diff), ratio, np.inf)
    worst = None
    if ratio.size:
        r, c = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        rows = np.nonzero(keep)[0]
        worst = (int(rows[r]), int(c), float(y[rows[r], c]), float(want.value[rows[r], c]), float(bound[r, c]))
    finite = diff[np.isfinite(diff)]
    return Verdict(int(diff.size), int(bad.sum()), int(want.excluded.sum()),
                   float(ratio.max()) if ratio.size else 0.0, float(finite.max()) if finite.size else 0.0, worst)
