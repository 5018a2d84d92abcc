# SPDX-License-Identifier: MIT OR Apache-2.0
"""The checkpoint variants, by format family. Within a family the family's own axis is covered in
full on the dense model; the MoE architectures share out the rest (pairwise, not the product), so
a family stays a few seconds. Layers alternate between 0 and 1 so --layer matters.

A family whose loader or kernels are missing fails; run_checkpoint_tests.py runs the families it
is given (meson registers the ones that work today).
"""
from typing import Dict, List

from build import Variant

FAMILIES: Dict[str, str] = {
    "gptq": "GPTQ int4, symmetric, group 128, no act-order, fp16 scales: v1 as AutoGPTQ and GPTQModel write "
            "it, v2 (GPTQModel), dense, Qwen3-MoE and Qwen2-MoE (shared expert + gate), one sharded",
    "gptq-group": "GPTQ int4 symmetric with group sizes 32, 64 and -1 (one group over all of K)",
    "gptq-asym": "GPTQ int4 sym=false: realistic zeros (v1 AutoGPTQ, v1 GPTQModel, v2), a zero of 0 (whole-word "
                 "v1 borrow), and every zero exactly 8 (still asymmetric by its config)",
    "gptq-act-order": "GPTQ desc_act=true: permuted g_idx as GPTQ builds it; static_groups (sequential g_idx)",
    "gptq-bf16": "GPTQ with bf16 scales (AutoGPTQ on a bfloat16 model)",
    "gptq-mix": "GPTQ axes combined pairwise: group size x sym x desc_act x scale dtype x v1/v2, dense and MoE",
    "gptq-router": "GPTQ as GPTQModel 4.0-4.2 writes Qwen MoEs: the router mlp.gate quantized too",
    "moe-names": "GPTQ baseline weights under Mixtral names (block_sparse_moe, w1/w2/w3 as transformers 4 "
                 "writes them, gate_proj/up_proj/down_proj as transformers 5 saves per-expert modules) and "
                 "DeepSeek-style shared_experts with softmax routing and routed_scaling_factor (layer 0 dense)",
    "awq": "AutoAWQ GEMM int4 with zero points, group 128 and 64, dense, Qwen3-MoE, Mixtral",
    "ct-int4": "compressed-tensors pack-quantized int4: group and channel strategies, symmetric and asymmetric",
    "ct-act-order": "compressed-tensors pack-quantized int4 as GPTQModifier writes it with actorder: \"group\" "
                    "(weight_g_idx, groups in activation order) and \"static\" (the default: plain tensors), "
                    "dense and MoE (Qwen3-MoE, Qwen2-MoE, Mixtral with transformers 5 names)",
    "fp8-block": "block FP8 (DeepSeek-V3 / Qwen3-FP8): F8_E4M3 weights, f32 weight_scale_inv per 128x128 block; "
                 "also transformers 5's fused expert tensors (FineGrainedFP8: experts.gate_up_proj / down_proj)",
    "ct-fp8": "compressed-tensors float-quantized FP8 with per-channel scales (FP8_DYNAMIC)",
    "ct-fp8-block": "compressed-tensors FP8_BLOCK: float-quantized FP8 with 128x128 block scales (weight_scale), "
                    "activations FP8 per token group of 128, dense and MoE",
    "gptq-int8": "GPTQ bits 8 (four codes per int32), symmetric and asymmetric, v1 and v2",
    "ct-int8": "compressed-tensors int-quantized W8A8: int8 weights with per-channel scales",
    "ct-w4a8": "compressed-tensors int-quantized W4A8 (llm-compressor's W4A8 scheme): 4-bit values one per int8, "
               "group 128 and 64, symmetric and asymmetric (weight_zero_point I8), dense and MoE",
    "ct-w4afp8": "compressed-tensors int-quantized W4AFP8 (llm-compressor's W4AFP8 scheme): 4-bit values one per "
                 "int8, group 128, FP8 dynamic per-token activations, dense and MoE",
    "ct-int8-static": "compressed-tensors int-quantized W8A8 with static per-tensor activation scales "
                      "(input_scale BF16 [1] per module, llm-compressor's minmax calibration)",
    "ct-fp8-static": "compressed-tensors float-quantized FP8 preset: weights and activations per tensor, static "
                     "(weight_scale [1], input_scale [1])",
    "bf16": "unquantized models as transformers' save_pretrained writes them (safetensors, config.json with "
            "torch_dtype, no quantization_config): bfloat16 and float16, dense Qwen3, Qwen3-MoE, Qwen2-MoE, Mixtral "
            "(transformers 4 and 5 per-expert names); quantized checkpoints whose FFN the declaration leaves in "
            "float (compressed-tensors ignore, AWQ modules_to_not_convert)",
}

# The families `meson test` runs (every one: tests/checkpoints/meson.build).
ENABLED = list(FAMILIES)


def _g(**kw) -> Dict:
    return dict(method="gptq", **kw)


def _v(out: List[Variant], family: str, name: str, arch: str, fmt: Dict, **kw) -> None:
    layer = kw.pop("layer", len(out) % 2)
    out.append(Variant(name=f"{family}/{name}-{arch}", family=family, arch=arch, fmt=fmt, layer=layer, **kw))


def _gptq(out):
    for arch in ("qwen3", "qwen3_moe", "qwen2_moe"):
        _v(out, "gptq", "v1-autogptq", arch, _g(writer="autogptq"))
        _v(out, "gptq", "v1-gptqmodel", arch, _g(writer="gptqmodel"))
        _v(out, "gptq", "v2", arch, _g(checkpoint_format="gptq_v2"), shards=2 if arch == "qwen3" else 1)


def _gptq_group(out):
    for g in (32, 64, -1):
        _v(out, "gptq-group", f"g{g}", "qwen3", _g(group_size=g))
    _v(out, "gptq-group", "g64-v2", "qwen3_moe", _g(group_size=64, checkpoint_format="gptq_v2"))
    _v(out, "gptq-group", "g32-autogptq", "qwen2_moe", _g(group_size=32, writer="autogptq"))


def _gptq_asym(out):
    _v(out, "gptq-asym", "v1-autogptq", "qwen3", _g(writer="autogptq", sym=False))
    _v(out, "gptq-asym", "v1-gptqmodel", "qwen3", _g(sym=False))
    _v(out, "gptq-asym", "v2", "qwen3", _g(sym=False, checkpoint_format="gptq_v2"))
    zero0 = {(0, 0): 0, (1, 9): 0, (0, 15): 0, (1, 31): 15}
    _v(out, "gptq-asym", "v1-gptqmodel-zero0", "qwen3", _g(sym=False, zero_override=zero0),
       notes="zeros of 0 borrow from the next field in v1")
    _v(out, "gptq-asym", "v2-zero0", "qwen3", _g(sym=False, checkpoint_format="gptq_v2", zero_override=zero0))
    _v(out, "gptq-asym", "v1-all-zeros-8", "qwen3", _g(sym=False, force_zero=8),
       notes="sym=false although every zero is 8: run as asymmetric")
    _v(out, "gptq-asym", "v2", "qwen3_moe", _g(sym=False, checkpoint_format="gptq_v2"))
    _v(out, "gptq-asym", "v1-gptqmodel", "qwen2_moe", _g(sym=False, group_size=64))


def _gptq_act_order(out):
    _v(out, "gptq-act-order", "v1-autogptq", "qwen3", _g(writer="autogptq", desc_act=True))
    _v(out, "gptq-act-order", "v2-g32", "qwen3", _g(desc_act=True, group_size=32, checkpoint_format="gptq_v2"))
    _v(out, "gptq-act-order", "static-groups", "qwen3", _g(desc_act=True, static_groups=True))
    _v(out, "gptq-act-order", "asym-v1", "qwen3", _g(desc_act=True, sym=False))
    _v(out, "gptq-act-order", "v1-gptqmodel", "qwen3_moe", _g(desc_act=True))
    _v(out, "gptq-act-order", "v2-asym", "qwen2_moe", _g(desc_act=True, sym=False, checkpoint_format="gptq_v2"))


def _gptq_bf16(out):
    for arch in ("qwen3", "qwen3_moe", "qwen2_moe"):
        _v(out, "gptq-bf16", "autogptq", arch, _g(writer="autogptq", scale_dtype="BF16"))


def _gptq_mix(out):
    # (group, sym, desc_act, bf16 scales, v2) chosen so every pair of values of two axes appears.
    rows = [(32, False, True, False, True), (64, True, True, True, False), (-1, False, False, True, False),
            (128, False, True, True, False), (32, True, False, True, False), (64, False, False, False, True),
            (-1, True, True, False, True), (128, True, False, False, True)]
    archs = ["qwen3", "qwen3_moe", "qwen2_moe", "qwen3"]
    for i, (g, sym, act, bf16, v2) in enumerate(rows):
        fmt = _g(group_size=g, sym=sym, desc_act=act, writer="autogptq" if bf16 else "gptqmodel",
                 scale_dtype="BF16" if bf16 else "F16", checkpoint_format="gptq_v2" if v2 else "gptq")
        _v(out, "gptq-mix", f"{i}-g{g}-{'sym' if sym else 'asym'}{'-act' if act else ''}{'-bf16' if bf16 else ''}"
                            f"{'-v2' if v2 else ''}", archs[i % len(archs)], fmt)


def _gptq_router(out):
    _v(out, "gptq-router", "gptqmodel4-v1", "qwen3_moe", _g(gptqmodel_version="4.2.5"))
    _v(out, "gptq-router", "gptqmodel4-v2", "qwen2_moe", _g(gptqmodel_version="4.2.5", checkpoint_format="gptq_v2"))


def _moe_names(out):
    _v(out, "moe-names", "gptq", "mixtral", _g())
    _v(out, "moe-names", "gptq-v2", "mixtral", _g(checkpoint_format="gptq_v2"), layer=0)
    _v(out, "moe-names", "gptq-tf5", "mixtral", _g(), extra={"layout": "tf5"})
    _v(out, "moe-names", "ct-int4-tf5", "mixtral", dict(method="ct-int4", symmetric=False), extra={"layout": "tf5"},
       layer=0)
    _v(out, "moe-names", "gptq", "deepseek_v2", _g(), layer=1)
    _v(out, "moe-names", "gptq-dense-layer", "deepseek_v2", _g(checkpoint_format="gptq_v2"), layer=0)


def _awq(out):
    _v(out, "awq", "gemm-g128", "qwen3", dict(method="awq"))
    _v(out, "awq", "gemm-g64", "qwen3", dict(method="awq", group_size=64), shards=2)
    _v(out, "awq", "gemm-g128", "qwen3_moe", dict(method="awq"))
    _v(out, "awq", "gemm-g64", "mixtral", dict(method="awq", group_size=64))


def _ct_int4(out):
    for strategy in ("group", "channel"):
        for sym in (True, False):
            _v(out, "ct-int4", f"{strategy}-{'sym' if sym else 'asym'}", "qwen3",
               dict(method="ct-int4", strategy=strategy, symmetric=sym))
    _v(out, "ct-int4", "group-sym", "qwen3_moe", dict(method="ct-int4"))
    _v(out, "ct-int4", "group64-asym", "qwen2_moe", dict(method="ct-int4", group_size=64, symmetric=False))
    _v(out, "ct-int4", "channel-sym", "deepseek_v2", dict(method="ct-int4", strategy="channel"))


def _ct_act_order(out):
    ct = dict(method="ct-int4")
    _v(out, "ct-act-order", "group-sym", "qwen3", dict(ct, actorder="group"))
    _v(out, "ct-act-order", "group-asym", "qwen3", dict(ct, actorder="group", symmetric=False))
    _v(out, "ct-act-order", "group64-sym", "qwen3", dict(ct, actorder="group", group_size=64))
    _v(out, "ct-act-order", "static-sym", "qwen3", dict(ct, actorder="static"))
    _v(out, "ct-act-order", "group-sym", "qwen3_moe", dict(ct, actorder="group"))
    _v(out, "ct-act-order", "group-asym", "qwen2_moe", dict(ct, actorder="group", symmetric=False))
    _v(out, "ct-act-order", "static-asym", "qwen3_moe", dict(ct, actorder="static", symmetric=False))
    _v(out, "ct-act-order", "group-sym-tf5", "mixtral", dict(ct, actorder="group"), extra={"layout": "tf5"})
    _v(out, "ct-act-order", "group-asym", "mixtral", dict(ct, actorder="group", symmetric=False))


def _fp8_block(out):
    _v(out, "fp8-block", "e4m3", "qwen3", dict(method="fp8-block"), shards=2)
    _v(out, "fp8-block", "e4m3", "qwen3_moe", dict(method="fp8-block"))
    _v(out, "fp8-block", "e4m3", "deepseek_v2", dict(method="fp8-block"), layer=1)
    _v(out, "fp8-block", "e4m3-fused", "qwen3_moe", dict(method="fp8-block"), extra={"layout": "fused"}, shards=2)
    _v(out, "fp8-block", "e4m3-fused", "mixtral", dict(method="fp8-block"), extra={"layout": "fused"})
    _v(out, "fp8-block", "e4m3", "mixtral", dict(method="fp8-block"))


def _ct_fp8(out):
    for arch in ("qwen3", "qwen3_moe", "mixtral"):
        _v(out, "ct-fp8", "channel", arch, dict(method="ct-fp8"))
    _v(out, "ct-fp8", "channel-tf5", "mixtral", dict(method="ct-fp8"), extra={"layout": "tf5"})


def _gptq_int8(out):
    _v(out, "gptq-int8", "v1-sym", "qwen3", _g(bits=8))
    _v(out, "gptq-int8", "v2-asym", "qwen3", _g(bits=8, sym=False, checkpoint_format="gptq_v2"))
    _v(out, "gptq-int8", "v1-asym-autogptq", "qwen3", _g(bits=8, sym=False, writer="autogptq"))
    _v(out, "gptq-int8", "v1-sym", "qwen3_moe", _g(bits=8))


def _ct_int8(out):
    for arch in ("qwen3", "qwen3_moe", "qwen2_moe", "mixtral"):
        _v(out, "ct-int8", "w8a8", arch, dict(method="ct-int8"))
    _v(out, "ct-int8", "w8a8-tf5", "mixtral", dict(method="ct-int8"), extra={"layout": "tf5"})


def _ct_w4a8(out):
    _v(out, "ct-w4a8", "group-sym", "qwen3", dict(method="ct-w4a8"))
    _v(out, "ct-w4a8", "group-asym", "qwen3", dict(method="ct-w4a8", symmetric=False))
    _v(out, "ct-w4a8", "group64-sym", "qwen3_moe", dict(method="ct-w4a8", group_size=64))
    _v(out, "ct-w4a8", "group-asym", "qwen2_moe", dict(method="ct-w4a8", symmetric=False))
    _v(out, "ct-w4a8", "group-sym-tf5", "mixtral", dict(method="ct-w4a8"), extra={"layout": "tf5"})
    _v(out, "ct-w4a8", "group-sym", "mixtral", dict(method="ct-w4a8"))


def _ct_w4afp8(out):
    _v(out, "ct-w4afp8", "group-sym", "qwen3", dict(method="ct-w4afp8"))
    _v(out, "ct-w4afp8", "group-asym", "qwen3_moe", dict(method="ct-w4afp8", symmetric=False))
    _v(out, "ct-w4afp8", "group-sym", "mixtral", dict(method="ct-w4afp8"))
    _v(out, "ct-w4afp8", "group-sym-tf5", "mixtral", dict(method="ct-w4afp8"), extra={"layout": "tf5"})


def _ct_static(out, method):
    for arch in ("qwen3", "qwen3_moe", "mixtral"):
        _v(out, method, "tensor", arch, dict(method=method))
    _v(out, method, "tensor-tf5", "mixtral", dict(method=method), extra={"layout": "tf5"})


def _ct_fp8_block(out):
    for arch in ("qwen3", "qwen3_moe", "qwen2_moe"):
        _v(out, "ct-fp8-block", "block128", arch, dict(method="ct-fp8-block"))
    _v(out, "ct-fp8-block", "block128-tf5", "mixtral", dict(method="ct-fp8-block"), extra={"layout": "tf5"})
    _v(out, "ct-fp8-block", "block128", "mixtral", dict(method="ct-fp8-block"))


def _bf16(out):
    for arch in ("qwen3", "qwen3_moe", "qwen2_moe", "mixtral"):
        _v(out, "bf16", "bfloat16", arch, dict(method="none"))
    _v(out, "bf16", "bfloat16-tf5", "mixtral", dict(method="none"), extra={"layout": "tf5"})
    for arch in ("qwen3", "qwen3_moe"):
        _v(out, "bf16", "float16", arch, dict(method="none", dtype="float16"))
    # One layer's FFN left in float by the declaration; the other layers stay quantized.
    _v(out, "bf16", "ct-int4-ignored", "qwen3", dict(method="ct-int4", extra_ignore=["re:model.layers.1.mlp.*"]), layer=1)
    _v(out, "bf16", "ct-int4-ignored", "qwen3_moe", dict(method="ct-int4", extra_ignore=["re:model.layers.0.mlp.experts.*"]),
       layer=0)
    _v(out, "bf16", "awq-not-converted", "qwen3", dict(method="awq", extra_ignore=["layers.0.mlp"]), layer=0)


_BUILDERS = {"gptq": _gptq, "gptq-group": _gptq_group, "gptq-asym": _gptq_asym, "gptq-act-order": _gptq_act_order,
             "gptq-bf16": _gptq_bf16, "gptq-mix": _gptq_mix, "gptq-router": _gptq_router, "moe-names": _moe_names, "awq": _awq,
             "ct-int4": _ct_int4, "ct-act-order": _ct_act_order, "fp8-block": _fp8_block, "ct-fp8": _ct_fp8, "gptq-int8": _gptq_int8,
             "ct-int8": _ct_int8, "ct-w4a8": _ct_w4a8,
             "ct-fp8-block": _ct_fp8_block, "ct-int8-static": lambda out: _ct_static(out, "ct-int8-static"),
             "ct-fp8-static": lambda out: _ct_static(out, "ct-fp8-static"), "ct-w4afp8": _ct_w4afp8, "bf16": _bf16}
assert set(_BUILDERS) == set(FAMILIES)


def variants(family: str) -> List[Variant]:
    out: List[Variant] = []
    _BUILDERS[family](out)
    return out
