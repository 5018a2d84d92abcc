# SPDX-License-Identifier: MIT OR Apache-2.0
"""Each tool's own dequantization, from the stored tensors and the checkpoint's
quantization_config alone: the float64 weight W [N, K] of one linear layer.

Written from the tools' published formulas (docs/checkpoint-formats.md), apart from writers.py:
a loader is right when it gives the values these functions give.
"""
from typing import Callable, Dict

import numpy as np

from numerics import bf16_value, e4m3_value
from safetensors_np import Tensor

Lookup = Callable[[str], Tensor]  # suffix ("qweight") -> the module's tensor


def float_values(t: Tensor) -> np.ndarray:
    if t.dtype == "BF16":
        return bf16_value(t.data)
    if t.dtype in ("F16", "F32", "F64"):
        return t.data.astype(np.float64)
    raise ValueError(f"expected a float tensor, got {t.dtype}")


def _u32(t: Tensor) -> np.ndarray:
    if t.dtype not in ("I32", "U32"):
        raise ValueError(f"expected a packed I32 tensor, got {t.dtype}")
    return t.data.view(np.uint32).astype(np.uint64)


def _unpack_rows(words: np.ndarray, bits: int) -> np.ndarray:
    """uint32 [R, C] -> [R*pf, C]: field i of word r is row r*pf + i."""
    pf = 32 // bits
    shifts = (np.arange(pf, dtype=np.uint64) * bits)[None, :, None]
    fields = (words[:, None, :] >> shifts) & np.uint64((1 << bits) - 1)
    return fields.reshape(words.shape[0] * pf, words.shape[1]).astype(np.int64)


def _unpack_cols(words: np.ndarray, bits: int) -> np.ndarray:
    """uint32 [R, C] -> [R, C*pf]: field i of word c is column c*pf + i."""
    pf = 32 // bits
    shifts = (np.arange(pf, dtype=np.uint64) * bits)[None, None, :]
    fields = (words[:, :, None] >> shifts) & np.uint64((1 << bits) - 1)
    return fields.reshape(words.shape[0], words.shape[1] * pf).astype(np.int64)


def gptq(get: Lookup, qcfg: Dict) -> np.ndarray:
    """W[n, k] = scales[g_idx[k], n] * (q[k, n] - zero[g_idx[k], n]). v1 ("gptq") stores zero - 1:
    one is added back to every field of a qzeros word with a whole-word add (GPTQModel's rule;
    the same as AutoGPTQ's per-field +1 whenever no stored field is all ones)."""
    bits = int(qcfg.get("bits", 4))
    fmt = qcfg.get("checkpoint_format", qcfg.get("format", "gptq"))
    q = _unpack_rows(_u32(get("qweight")), bits)  # [K, N]
    k, n = q.shape
    zwords = _u32(get("qzeros"))
    if fmt == "gptq":
        pf = 32 // bits
        zwords = (zwords + sum(1 << (bits * i) for i in range(pf))) & np.uint64(0xFFFFFFFF)
    elif fmt != "gptq_v2":
        raise ValueError(f"GPTQ checkpoint_format '{fmt}' is not gptq or gptq_v2")
    zeros = _unpack_cols(zwords, bits)[:, :n]  # [G, N]
    scales = float_values(get("scales"))  # [G, N]
    group_size = int(qcfg.get("group_size", 128))
    try:
        g_idx = get("g_idx").data.astype(np.int64)
    except KeyError:
        g_idx = np.arange(k) // (k if group_size == -1 else group_size)
    return (scales[g_idx] * (q - zeros[g_idx])).T


AWQ_REVERSE = [0, 4, 1, 5, 2, 6, 3, 7]  # column j of a word of 8 sits in field AWQ_REVERSE[j]


def awq_gemm(get: Lookup, qcfg: Dict) -> np.ndarray:
    """W[n, k] = (q[k, n] - zero[k / g, n]) * scales[k / g, n], fields in AWQ's order."""
    group_size = int(qcfg.get("group_size", 128))

    def unpack(t: Tensor) -> np.ndarray:
        words = _u32(t)
        fields = np.stack([(words >> np.uint64(4 * f)) & np.uint64(0xF) for f in AWQ_REVERSE], axis=2)
        return fields.reshape(words.shape[0], words.shape[1] * 8).astype(np.int64)

    q = unpack(get("qweight"))  # [K, N]
    zeros = unpack(get("qzeros"))  # [K/g, N]
    scales = float_values(get("scales"))
    gi = np.arange(q.shape[0]) // group_size
    return ((q - zeros[gi]) * scales[gi]).T


def ct_weights_args(qcfg: Dict) -> Dict:
    groups = list(qcfg["config_groups"].values())
    if len(groups) != 1:
        raise ValueError("these tests write one config group")
    return groups[0]["weights"]


def ct_pack(get: Lookup, qcfg: Dict) -> np.ndarray:
    """pack-quantized: q = field - 2^(b-1) (signed), W = (q - zp) * scale[n, group(k)], group(k) =
    weight_g_idx[k] when stored (actorder "group"), else k / g."""
    args = ct_weights_args(qcfg)
    bits = int(args["num_bits"])
    n, k = (int(v) for v in get("weight_shape").data)
    q = _unpack_cols(_u32(get("weight_packed")), bits)[:, :k] - (1 << (bits - 1))
    scale = float_values(get("weight_scale"))
    g = k // scale.shape[1]
    if args["symmetric"]:
        zp = np.zeros_like(scale)
    else:
        zp = (_unpack_rows(_u32(get("weight_zero_point")), bits)[:n] - (1 << (bits - 1))).astype(np.float64)
    gi = np.arange(k) // g
    try:  # actorder "group": the group of each column; -1 (never filled in) reads as column order
        g_idx = get("weight_g_idx").data.astype(np.int64)
        if not (g_idx == -1).any():
            gi = g_idx
    except KeyError:
        pass
    return (q - zp[:, gi]) * scale[:, gi]


def ct_naive(get: Lookup, qcfg: Dict) -> np.ndarray:
    """int-quantized / float-quantized: one value per element, W = (q - zp) * weight_scale[n, k / g]
    (g = K / the scale's columns), zp = weight_zero_point[n, k / g] when stored, else 0; block
    strategy (FP8_BLOCK): W = q * weight_scale[n / bn, k / bk]."""
    t = get("weight")
    q = e4m3_value(t.data) if t.dtype == "F8_E4M3" else t.data.astype(np.float64)
    scale = float_values(get("weight_scale"))
    if scale.size == 1:  # tensor strategy (the FP8 preset): one scale for the whole weight
        return q * scale.reshape(())
    if scale.shape[0] != q.shape[0]:  # block strategy: one scale per 128x128 block
        bn, bk = ct_weights_args(qcfg)["block_structure"]
        n, k = q.shape
        return q * scale[np.arange(n) // bn][:, np.arange(k) // bk]
    gi = np.arange(q.shape[1]) // (q.shape[1] // scale.shape[1])
    try:
        zp = get("weight_zero_point").data.astype(np.float64)
    except KeyError:
        zp = np.zeros_like(scale)
    return (q - zp[:, gi]) * scale[:, gi]


def fp8_block(get: Lookup, qcfg: Dict) -> np.ndarray:
    """W[n, k] = fp8[n, k] * weight_scale_inv[n / bn, k / bk]."""
    bn, bk = qcfg.get("weight_block_size", [128, 128])
    q = e4m3_value(get("weight").data)
    s = float_values(get("weight_scale_inv"))
    n, k = q.shape
    return q * s[np.arange(n) // bn][:, np.arange(k) // bk]


def decode(get: Lookup, qcfg: Dict) -> np.ndarray:
    """The float64 weight of one module: unquantized `weight` when the module has a float
    weight, else the decoder of the checkpoint's quant_method/format."""
    try:
        w = get("weight")
        if w.dtype in ("BF16", "F16", "F32"):
            return float_values(w)
    except KeyError:
        pass
    method = qcfg.get("quant_method")
    if method == "gptq":
        return gptq(get, qcfg)
    if method == "awq":
        return awq_gemm(get, qcfg)
    if method == "fp8":
        return fp8_block(get, qcfg)
    if method == "compressed-tensors":
        return ct_pack(get, qcfg) if qcfg["format"] == "pack-quantized" else ct_naive(get, qcfg)
    raise ValueError(f"quant_method '{method}' is not one these tests decode")
