# SPDX-License-Identifier: MIT OR Apache-2.0
"""What each quantization tool writes for one linear layer, from a float weight W [N, K] (N
outputs, K inputs, torch's nn.Linear layout): the tensors, their names, layouts, bit orders,
stored zeros and dtypes, as docs/checkpoint-formats.md describes them.

The integer codes come from round-to-nearest with each tool's own scale and zero rule. GPTQ's
error feedback (and AWQ's activation-aware search) change which codes a real tool picks, never
how they are stored, so plain rounding exercises a loader exactly as a real checkpoint does.

Every function returns {suffix: Tensor}; the caller prefixes the module name ("...down_proj.").
Nothing here is used to compute the expected output (expected.py decodes the files instead).
"""
from typing import Dict, Optional

import numpy as np

from numerics import bf16_bits, e4m3_codes, e4m3_value, f16_value, bf16_value
from safetensors_np import Tensor, tensor

MASK32 = 0xFFFFFFFF


def _store_float(values: np.ndarray, dtype: str) -> Tensor:
    if dtype == "F16":
        return tensor("F16", np.asarray(values, dtype=np.float64).astype(np.float16))
    if dtype == "BF16":
        return Tensor("BF16", bf16_bits(values))
    if dtype == "F32":
        return tensor("F32", values)
    raise ValueError(dtype)


def _stored_value(values: np.ndarray, dtype: str) -> np.ndarray:
    """The value a float becomes once stored as `dtype`."""
    return {"F16": f16_value, "BF16": lambda v: bf16_value(bf16_bits(v)), "F32": lambda v: np.float32(v).astype(np.float64)}[dtype](values)


def _pack_rows(codes: np.ndarray, bits: int) -> np.ndarray:
    """codes [R, C] (R a multiple of 32/bits) -> uint32 [R*bits/32, C]: word r holds codes
    r*pf .. r*pf+pf-1 of its column, the lowest at bit 0 (GPTQ's qweight)."""
    pf = 32 // bits
    c = codes.astype(np.uint64).reshape(codes.shape[0] // pf, pf, codes.shape[1])
    shifts = (np.arange(pf, dtype=np.uint64) * bits)[None, :, None]
    return ((c << shifts).sum(axis=1) & MASK32).astype(np.uint32)


def _pack_cols(codes: np.ndarray, bits: int, order=None) -> np.ndarray:
    """codes [R, C] -> uint32 [R, C*bits/32]: word c holds columns c*pf .. c*pf+pf-1, field i
    (bits i*bits ..) taking column c*pf + order[i] (identity unless given)."""
    pf = 32 // bits
    order = list(range(pf)) if order is None else order
    c = codes.astype(np.uint64).reshape(codes.shape[0], codes.shape[1] // pf, pf)[:, :, order]
    shifts = (np.arange(pf, dtype=np.uint64) * bits)[None, None, :]
    return ((c << shifts).sum(axis=2) & MASK32).astype(np.uint32)


# ---- GPTQ (AutoGPTQ 0.7/0.8, GPTQModel 1.x-4.x) ------------------------------------------

def _gptq_params(x: np.ndarray, maxq: int, sym: bool):
    """GPTQ's Quantizer.find_params for rows of x [N, g]: (scale [N], zero [N])."""
    xmin = np.minimum(x.min(axis=1), 0.0)
    xmax = np.maximum(x.max(axis=1), 0.0)
    if sym:
        xmax = np.maximum(np.abs(xmin), xmax)
        xmin = np.where(xmin < 0, -xmax, xmin)
    both_zero = (xmin == 0) & (xmax == 0)
    xmin = np.where(both_zero, -1.0, xmin)
    xmax = np.where(both_zero, 1.0, xmax)
    scale = ((xmax - xmin) / maxq).astype(np.float32).astype(np.float64)
    zero = np.full_like(scale, (maxq + 1) / 2) if sym else np.round(-xmin / scale)
    return scale, zero


def act_order_permutation(k: int, rng: np.random.Generator) -> np.ndarray:
    """desc_act: GPTQ visits columns by decreasing Hessian diagonal; a random positive diagonal
    stands in for the calibration statistics."""
    diag = rng.random(k)
    return np.argsort(-diag, kind="stable")


def gptq(w: np.ndarray, *, bits: int = 4, group_size: int = 128, sym: bool = True, desc_act: bool = False,
         static_groups: bool = False, checkpoint_format: str = "gptq", writer: str = "gptqmodel",
         scale_dtype: str = "F16", rng: Optional[np.random.Generator] = None,
         force_zero: Optional[int] = None, zero_override: Optional[dict] = None) -> Dict[str, Tensor]:
    """qweight I32 [K/pf, N], qzeros I32 [G, N/pf], scales [G, N], g_idx I32 [K].

    checkpoint_format "gptq" (v1) stores zero - 1: `writer` "autogptq" packs (zero - 1) as uint32
    with OR (a zero of 0 becomes 0xFFFFFFFF and floods the higher fields of its word);
    "gptqmodel" packs true zeros and subtracts 0x11111111 (bits 4) / 0x01010101 (bits 8) from
    each whole word, borrowing across fields. "gptq_v2" stores the true zeros.
    force_zero: every zero set to this value (asymmetric checkpoints whose zeros happen to be 8).
    zero_override: {(group, column): zero} for chosen entries (e.g. a zero of 0).
    """
    n, k = w.shape
    maxq = 2 ** bits - 1
    g = k if group_size == -1 else group_size
    groups = k // g
    perm = act_order_permutation(k, rng) if desc_act else np.arange(k)
    invperm = np.argsort(perm)
    wp = w[:, perm]  # the order GPTQ quantizes in
    scale = np.zeros((groups, n))
    zero = np.zeros((groups, n))
    for j in range(groups):
        # static_groups: the groups are fixed on the original column order before permuting.
        cols = w[:, j * g:(j + 1) * g] if static_groups else wp[:, j * g:(j + 1) * g]
        scale[j], zero[j] = _gptq_params(cols, maxq, sym)
        if force_zero is not None:
            zero[j] = force_zero
    for (j, col), z in (zero_override or {}).items():
        zero[j, col] = z
    # g_idx[k]: the group of original column k.
    if desc_act and not static_groups:
        g_idx = invperm // g
    else:
        g_idx = np.arange(k) // g
    stored_scale = _stored_value(scale, scale_dtype)
    q = np.clip(np.round(w / stored_scale[g_idx].T) + zero[g_idx].T, 0, maxq).astype(np.int64)  # [N, K]
    qweight = _pack_rows(q.T, bits)
    z = zero.astype(np.int64)
    pf = 32 // bits
    if checkpoint_format == "gptq_v2":
        qzeros = _pack_cols(z, bits)
    elif writer == "gptqmodel":
        word_one = sum(1 << (bits * i) for i in range(pf))
        qzeros = ((_pack_cols(z, bits).astype(np.int64) - word_one) & MASK32).astype(np.uint32)
    elif writer == "autogptq":
        if (z == 0).any():
            raise ValueError("AutoGPTQ's v1 packing garbles a zero of 0 (docs/checkpoint-formats.md): choose weights "
                             "whose groups all reach below zero, or write it as GPTQModel does")
        minus = (z - 1) & MASK32  # -1 -> 0xFFFFFFFF, as numpy's astype(uint32) in the tool
        qzeros = np.zeros((groups, n // pf), dtype=np.uint64)
        for i in range(pf):
            qzeros |= (minus[:, i::pf].astype(np.uint64) << np.uint64(bits * i))
        qzeros = (qzeros & MASK32).astype(np.uint32)
    else:
        raise ValueError(writer)
    return {
        "qweight": Tensor("I32", qweight.view(np.int32)),
        "qzeros": Tensor("I32", qzeros.view(np.int32)),
        "scales": _store_float(scale, scale_dtype),
        "g_idx": tensor("I32", g_idx),
    }


# ---- AWQ GEMM (AutoAWQ 0.2.x) ---------------------------------------------------------------

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def awq_gemm(w: np.ndarray, *, group_size: int = 128) -> Dict[str, Tensor]:
    """qweight I32 [K, N/8] and qzeros I32 [K/g, N/8] packed along N in AWQ's order, scales F16
    [K/g, N]. AutoAWQ's GEMM layer needs zero points (zero_point true)."""
    n, k = w.shape
    groups = k // group_size
    wg = w.reshape(n, groups, group_size)
    max_val = wg.max(axis=2)
    min_val = wg.min(axis=2)
    scales = f16_value(np.maximum(max_val - min_val, 1e-5) / 15)  # the layer runs in fp16
    zeros = np.clip(-np.round(min_val / scales), 0, 15)
    q = np.clip(np.round(wg / scales[:, :, None]) + zeros[:, :, None], 0, 15).reshape(n, k).astype(np.int64)
    return {
        "qweight": Tensor("I32", _pack_cols(q.T, 4, AWQ_ORDER).view(np.int32)),
        "qzeros": Tensor("I32", _pack_cols(zeros.T.astype(np.int64), 4, AWQ_ORDER).view(np.int32)),
        "scales": tensor("F16", scales.T),
    }


# ---- compressed-tensors (0.10-0.12) ------------------------------------------------------------

def _ct_minmax(w: np.ndarray, group: int):
    n, k = w.shape
    wg = w.reshape(n, k // group, group)
    return np.minimum(wg.min(axis=2), 0.0), np.maximum(wg.max(axis=2), 0.0)


def _ct_int4_quantize(w: np.ndarray, group: int, g_idx: np.ndarray, symmetric: bool, scale_dtype: str):
    """compressed-tensors' minmax int4 of w [N, K], groups g_idx (the group of each column): the
    signed values q in [-8, 7], the scales and zero points per [N, group]. Symmetric: scale
    max|w| / 7.5, zero point 0; asymmetric: (max - min) / 15, zp = -8 - round(min / scale)."""
    order = np.argsort(g_idx, kind="stable")  # each group's columns together, groups ascending
    lo, hi = _ct_minmax(w[:, order], group)
    if symmetric:
        scale = np.maximum(np.maximum(np.abs(lo), np.abs(hi)) / 7.5, np.finfo(np.float32).eps)
        zp = np.zeros_like(scale)
    else:
        scale = np.maximum((hi - lo) / 15, np.finfo(np.float32).eps)
        zp = np.round(np.clip(-8 - lo / scale, -8, 7))
    stored = _stored_value(scale, scale_dtype)
    q = np.clip(np.round(w / stored[:, g_idx] + zp[:, g_idx]), -8, 7).astype(np.int64)
    return q, scale, zp


def ct_pack_int4(w: np.ndarray, *, strategy: str = "group", group_size: int = 128, symmetric: bool = True,
                 scale_dtype: str = "BF16", actorder: Optional[str] = None,
                 rng: Optional[np.random.Generator] = None) -> Dict[str, Tensor]:
    """pack-quantized: weight_packed I32 [N, K/8] (signed codes + 8, k ascending from bit 0),
    weight_scale [N, K/g] ([N, 1] for channel), weight_shape I64 [2], and for asymmetric
    group/channel weight_zero_point I32 [ceil(N/8), K/g] packed along N the same way.

    actorder (GPTQModifier's activation ordering): "group" forms the groups in activation order
    (group j holds the j-th g columns GPTQ visits) and stores weight_g_idx I32 [K], the group of
    each column, with the weights still in column order; "static" (GPTQModifier's default, alias
    of "weight") only visits the columns in that order: the groups stay in column order and no
    g_idx is stored, so the tensors are the plain format's."""
    n, k = w.shape
    g = k if strategy == "channel" else group_size
    if actorder == "group":
        g_idx = np.argsort(act_order_permutation(k, rng)) // g
    else:
        g_idx = np.arange(k) // g
    q, scale, zp = _ct_int4_quantize(w, g, g_idx, symmetric, scale_dtype)
    out = {
        "weight_packed": Tensor("I32", _pack_cols(q + 8, 4).view(np.int32)),
        "weight_scale": _store_float(scale, scale_dtype),
        "weight_shape": tensor("I64", [n, k]),
    }
    if actorder == "group":
        out["weight_g_idx"] = tensor("I32", g_idx)
    if not symmetric:
        zp_u = zp.astype(np.int64) + 8
        pad = (-n) % 8
        zp_u = np.concatenate([zp_u, np.zeros((pad, zp_u.shape[1]), dtype=np.int64)])
        out["weight_zero_point"] = Tensor("I32", _pack_rows(zp_u, 4).view(np.int32))
    return out


def ct_int8_channel(w: np.ndarray, *, scale_dtype: str = "BF16") -> Dict[str, Tensor]:
    """int-quantized (W8A8 weights): weight I8 [N, K], weight_scale [N, 1]."""
    lo, hi = _ct_minmax(w, w.shape[1])
    scale = np.maximum(np.maximum(np.abs(lo), np.abs(hi)) / 127.5, np.finfo(np.float32).eps)
    stored = _stored_value(scale, scale_dtype)
    q = np.clip(np.round(w / stored), -128, 127)
    return {"weight": tensor("I8", q), "weight_scale": _store_float(scale, scale_dtype)}


def ct_int4_naive(w: np.ndarray, *, group_size: int = 128, symmetric: bool = True,
                  scale_dtype: str = "BF16") -> Dict[str, Tensor]:
    """int-quantized 4-bit (llm-compressor's W4A8 preset: weights int4 group 128, int8 dynamic
    per-token activations): weight I8 [N, K] holding one signed value in [-8, 7] per byte,
    weight_scale [N, K/g], and for asymmetric weights weight_zero_point I8 [N, K/g], unpacked."""
    q, scale, zp = _ct_int4_quantize(w, group_size, np.arange(w.shape[1]) // group_size, symmetric, scale_dtype)
    out = {"weight": tensor("I8", q), "weight_scale": _store_float(scale, scale_dtype)}
    if not symmetric:
        out["weight_zero_point"] = tensor("I8", zp)
    return out


def ct_fp8_channel(w: np.ndarray, *, scale_dtype: str = "BF16") -> Dict[str, Tensor]:
    """float-quantized (FP8_DYNAMIC weights): weight F8_E4M3 [N, K], weight_scale [N, 1]."""
    lo, hi = _ct_minmax(w, w.shape[1])
    scale = np.maximum(np.maximum(np.abs(lo), np.abs(hi)) / 448.0, np.finfo(np.float32).eps)
    stored = _stored_value(scale, scale_dtype)
    return {"weight": Tensor("F8_E4M3", e4m3_codes(w / stored)), "weight_scale": _store_float(scale, scale_dtype)}


def ct_fp8_tensor(w: np.ndarray, *, scale_dtype: str = "BF16") -> Dict[str, Tensor]:
    """float-quantized FP8 per tensor (the FP8 preset's weights): weight F8_E4M3 [N, K],
    weight_scale [1] = amax / 448 in the model's dtype."""
    scale = np.maximum(np.abs(w).max() / 448.0, np.finfo(np.float32).eps).reshape(1)
    stored = _stored_value(scale, scale_dtype)
    return {"weight": Tensor("F8_E4M3", e4m3_codes(w / stored)), "weight_scale": _store_float(scale, scale_dtype)}


def static_input_scale(rng: np.random.Generator, qmax: float, scale_dtype: str = "BF16") -> Dict[str, Tensor]:
    """input_scale [1] as llm-compressor's calibration leaves it for static activations: the
    minmax observer's max |x| over the calibration inputs / qmax (127.5 for int8, 448 for FP8), in
    the model's dtype. The calibration maximum is drawn from `rng`, which gate and up share (they
    observe the same inputs, hence one scale), between 0.25 and 1: inputs of the test beyond it
    saturate, as unseen outliers do."""
    return {"input_scale": _store_float(np.array([rng.uniform(0.25, 1.0) / qmax]), scale_dtype)}


def ct_fp8_block(w: np.ndarray, *, scale_dtype: str = "BF16") -> Dict[str, Tensor]:
    """float-quantized FP8 with 128x128 blocks (FP8_BLOCK): weight F8_E4M3 [N, K], weight_scale
    [ceil(N/128), ceil(K/128)] in the model's dtype, amax / 448 of each block."""
    codes, scale = _fp8_blocks(w, (128, 128), lambda s: _stored_value(s, scale_dtype))
    return {"weight": Tensor("F8_E4M3", codes), "weight_scale": _store_float(scale, scale_dtype)}


# ---- Block FP8 (DeepSeek-V3, Qwen3-FP8, transformers' FineGrainedFP8) ------------------------

def _fp8_blocks(w: np.ndarray, block, stored):
    """FP8 codes of w [N, K] per block and the block scales, amax / 448 each; `stored` rounds a
    scale to the dtype it is saved in (the codes are made with the stored value)."""
    n, k = w.shape
    bn, bk = block
    rows, cols = -(-n // bn), -(-k // bk)
    scale = np.zeros((rows, cols))
    codes = np.zeros((n, k), dtype=np.uint8)
    for r in range(rows):
        for c in range(cols):
            blk = w[r * bn:(r + 1) * bn, c * bk:(c + 1) * bk]
            s = float(stored(np.array([max(np.abs(blk).max(), 1e-12) / 448.0]))[0])
            scale[r, c] = s
            codes[r * bn:(r + 1) * bn, c * bk:(c + 1) * bk] = e4m3_codes(blk / s)
    assert np.isfinite(e4m3_value(codes)).all()
    return codes, scale


def fp8_block(w: np.ndarray, *, block=(128, 128)) -> Dict[str, Tensor]:
    """weight F8_E4M3 [N, K], weight_scale_inv F32 [ceil(N/bn), ceil(K/bk)]: the factor that
    multiplies the FP8 values back (amax / 448 of its block, despite the name)."""
    codes, scale = _fp8_blocks(w, block, lambda s: s.astype(np.float32))
    return {"weight": Tensor("F8_E4M3", codes), "weight_scale_inv": tensor("F32", scale)}


def plain(w: np.ndarray, dtype: str) -> Dict[str, Tensor]:
    """An unquantized linear layer (routers, shared_expert_gate, ignored modules)."""
    return {"weight": _store_float(w, dtype)}
