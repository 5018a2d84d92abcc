# SPDX-License-Identifier: MIT OR Apache-2.0
"""Each format as its tool writes a checkpoint: the quantization_config in config.json, the sidecar
files, the file names, the model dtype (which sets the dtype of everything left unquantized), which
modules stay unquantized, and the quantizer of writers.py for the rest.

A format is a dict: {"method": ..., parameters...}; see FORMAT_DEFAULTS for the parameters.
"""
import re
from typing import Callable, Dict, Optional, Tuple

import numpy as np

import writers

GPTQMODEL_VERSION = "5.6.12"  # 4.x: gptqmodel_version="4.2.5"
AUTOGPTQ_VERSION = "0.7.1"
CT_VERSION = "0.11.0"

FORMAT_DEFAULTS = {
    # writer: "autogptq" (v1 only) or "gptqmodel"; checkpoint_format "gptq" (v1) or "gptq_v2".
    "gptq": dict(writer="gptqmodel", checkpoint_format="gptq", bits=4, group_size=128, sym=True, desc_act=False,
                 static_groups=False, scale_dtype="F16", force_zero=None, zero_override=None,
                 gptqmodel_version=GPTQMODEL_VERSION),
    "awq": dict(group_size=128),
    # strategy "group" or "channel".
    # actorder None, "static" (GPTQModifier's default: plain tensors) or "group" (weight_g_idx).
    "ct-int4": dict(strategy="group", group_size=128, symmetric=True, actorder=None),
    "ct-int8": dict(),
    "ct-w4a8": dict(group_size=128, symmetric=True),
    "ct-w4afp8": dict(group_size=128, symmetric=True),
    "ct-fp8": dict(),
    "ct-fp8-block": dict(),
    "ct-int8-static": dict(),
    "ct-fp8-static": dict(),
    "fp8-block": dict(),
    # No quantization at all: save_pretrained of a model in `dtype` (torch_dtype, no quantization_config).
    "none": dict(dtype="bfloat16"),
}


def resolved(fmt: Dict) -> Dict:
    out = dict(FORMAT_DEFAULTS[fmt["method"]])
    out.update(fmt)
    return out


def weight_bits(fmt: Dict) -> int:
    """Bits per quantized weight value (8 for the FP8 formats)."""
    f = resolved(fmt)
    if f["method"] == "gptq":
        return int(f["bits"])
    return 4 if f["method"] in ("awq", "ct-int4", "ct-w4a8", "ct-w4afp8") else 8


def model_dtype(fmt: Dict) -> str:
    """torch_dtype of the saved model: AutoGPTQ and AutoAWQ load models in float16 (AutoGPTQ in
    bfloat16 when asked, which then also makes its scales bf16); the others keep bfloat16."""
    f = resolved(fmt)
    if f["method"] == "none":
        return f["dtype"]
    if f["method"] == "gptq" and f["writer"] == "autogptq":
        return "bfloat16" if f["scale_dtype"] == "BF16" else "float16"
    if f["method"] == "awq":
        return "float16"
    return "bfloat16"


def float_dtype(fmt: Dict) -> str:
    return {"float16": "F16", "bfloat16": "BF16"}[model_dtype(fmt)]


def _gptq_config(f: Dict) -> Dict:
    if f["writer"] == "autogptq":
        return {"bits": f["bits"], "group_size": f["group_size"], "damp_percent": 0.01, "desc_act": f["desc_act"],
                "static_groups": f["static_groups"], "sym": f["sym"], "true_sequential": True,
                "model_name_or_path": None, "model_file_base_name": None, "quant_method": "gptq",
                "checkpoint_format": "gptq"}
    version = f["gptqmodel_version"]
    meta = {"quantizer": [f"gptqmodel:{version}"], "uri": "https://github.com/modelcloud/gptqmodel",
            "damp_percent": 0.05, "damp_auto_increment": 0.01, "static_groups": f["static_groups"],
            "true_sequential": True, "mse": 0.0}
    if version.startswith("4."):
        meta.update(v2=False, v2_alpha=0.25, act_group_aware=False)
    else:
        meta.update(gptaq=None, gptaq_alpha=0.25, act_group_aware=not f["desc_act"])
    out = {"bits": f["bits"], "group_size": f["group_size"], "desc_act": f["desc_act"], "sym": f["sym"],
           "lm_head": False, "quant_method": "gptq", "checkpoint_format": f["checkpoint_format"], "pack_dtype": "int32",
           "meta": {k: v for k, v in meta.items() if v is not None}}
    if not version.startswith("4."):
        out["format"] = f["checkpoint_format"]  # 5.x writes both names
    return out


def _ct_args(num_bits, type_, strategy, symmetric, group_size=None, dynamic=False, observer="minmax", actorder=None):
    return {"num_bits": num_bits, "type": type_, "symmetric": symmetric, "group_size": group_size,
            "strategy": strategy, "block_structure": None, "dynamic": dynamic, "actorder": actorder,
            "observer": observer, "observer_kwargs": {}}


def _ct_config(f: Dict, ignore) -> Dict:
    method = f["method"]
    if method == "ct-int4":
        weights = _ct_args(4, "int", f["strategy"], f["symmetric"],
                           f["group_size"] if f["strategy"] == "group" else None, actorder=f["actorder"])
        acts, fmt = None, "pack-quantized"
    elif method == "ct-int8":
        weights = _ct_args(8, "int", "channel", True)
        acts, fmt = _ct_args(8, "int", "token", True, dynamic=True, observer=None), "int-quantized"
    elif method == "ct-w4a8":
        weights = _ct_args(4, "int", "group", f["symmetric"], f["group_size"])
        acts, fmt = _ct_args(8, "int", "token", True, dynamic=True, observer=None), "int-quantized"
    elif method == "ct-w4afp8":  # llm-compressor's W4AFP8: int4 weights, FP8 activations per token
        weights = _ct_args(4, "int", "group", f["symmetric"], f["group_size"])
        acts, fmt = _ct_args(8, "float", "token", True, dynamic=True, observer=None), "int-quantized"
    elif method == "ct-int8-static":  # W8A8 with static per-tensor activation scales
        weights = _ct_args(8, "int", "channel", True)
        acts, fmt = _ct_args(8, "int", "tensor", True), "int-quantized"
    elif method == "ct-fp8-static":  # the FP8 preset: weights and activations per tensor, static
        weights = _ct_args(8, "float", "tensor", True)
        acts, fmt = _ct_args(8, "float", "tensor", True), "float-quantized"
    elif method == "ct-fp8-block":
        weights = dict(_ct_args(8, "float", "block", True), block_structure=[128, 128])
        acts, fmt = _ct_args(8, "float", "group", True, 128, dynamic=True, observer=None), "float-quantized"
    else:
        weights = _ct_args(8, "float", "channel", True)
        acts, fmt = _ct_args(8, "float", "token", True, dynamic=True, observer=None), "float-quantized"
    return {"config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": acts,
                                          "output_activations": None, "format": fmt}},
            "format": fmt, "global_compression_ratio": None, "ignore": ignore, "kv_cache_scheme": None,
            "quant_method": "compressed-tensors", "quantization_status": "compressed", "sparsity_config": {},
            "transform_config": {}, "version": CT_VERSION}


def quantization_config(fmt: Dict, arch: str) -> Optional[Dict]:
    """None for an unquantized model (config.json then has no quantization_config)."""
    f = resolved(fmt)
    m = f["method"]
    if m == "none":
        return None
    if m == "gptq":
        return _gptq_config(f)
    if m == "awq":
        not_convert = {"mixtral": ["gate"], "qwen3_moe": ["mlp.gate"], "qwen2_moe": ["mlp.gate", "shared_expert_gate"]}
        skip = not_convert.get(arch)
        if f.get("extra_ignore"):  # more modules left in float (the model dtype)
            skip = (skip or []) + f["extra_ignore"]
        return {"quant_method": "awq", "zero_point": True, "group_size": f["group_size"], "bits": 4, "version": "gemm",
                "modules_to_not_convert": skip}
    if m.startswith("ct-"):
        ignore = ["lm_head", "re:.*block_sparse_moe.gate$" if arch == "mixtral" else "re:.*mlp.gate$"]
        if arch == "qwen2_moe":
            ignore.append("re:.*mlp.shared_expert_gate$")
        return _ct_config(f, ignore + f.get("extra_ignore", []))
    if m == "fp8-block":
        return {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
    raise ValueError(m)


def files(fmt: Dict, arch: str) -> Tuple[str, Dict[str, Dict]]:
    """(the single weights file's name, sidecar JSON files beside config.json)."""
    f = resolved(fmt)
    if f["method"] == "gptq":
        sidecar = {"quantize_config.json": quantization_config(fmt, arch)}
        if f["writer"] == "autogptq":
            return f"gptq_model-{f['bits']}bit-{f['group_size']}g.safetensors", sidecar
        return "model.safetensors", sidecar
    return "model.safetensors", {}


def metadata(fmt: Dict) -> Dict[str, str]:
    f = resolved(fmt)
    meta = {"format": "pt"}
    if f["method"] == "gptq" and f["writer"] == "autogptq":
        meta.update(auto_gptq_version=AUTOGPTQ_VERSION, gptq_bits=str(f["bits"]), gptq_group_size=str(f["group_size"]),
                    gptq_desc_act=str(f["desc_act"]), gptq_damp_percent="0.01", gptq_checkpoint_format="gptq",
                    gptq_quant_method="gptq")
    return meta


def quantizes_router(fmt: Dict, arch: str) -> bool:
    """GPTQModel 4.0-4.2 quantizes the Qwen-MoE router (mlp.gate) like any other linear layer;
    earlier and later versions, and the other tools here, keep routers in float."""
    f = resolved(fmt)
    return (f["method"] == "gptq" and f["writer"] == "gptqmodel" and f["gptqmodel_version"].startswith("4.")
            and arch in ("qwen2_moe", "qwen3_moe"))


def left_unquantized(fmt: Dict, arch: str, module: str) -> bool:
    """Modules a tool keeps in float besides routers and shared_expert_gate (which every tool here
    keeps): AutoAWQ skips modules whose name contains an entry of modules_to_not_convert;
    compressed-tensors skips the `ignore` entries (re: patterns)."""
    f = resolved(fmt)
    q = quantization_config(fmt, arch)
    if f["method"] == "none":
        return True
    if f["method"] == "awq":
        return any(key in module for key in (q["modules_to_not_convert"] or []))
    if f["method"].startswith("ct-"):
        return any(re.match(p[3:], module) if p.startswith("re:") else p == module for p in q["ignore"])
    return False


def quantizer(fmt: Dict) -> Callable[[np.ndarray, np.random.Generator], Dict]:
    f = resolved(fmt)
    m = f["method"]
    if m == "none":  # nothing is quantized (left_unquantized says so for every module)
        return lambda w, rng: writers.plain(w, float_dtype(fmt))
    if m == "gptq":
        keys = ("bits", "group_size", "sym", "desc_act", "static_groups", "checkpoint_format", "writer", "scale_dtype",
                "force_zero", "zero_override")  # gptqmodel_version changes the config, not the tensors
        return lambda w, rng: writers.gptq(w, rng=rng, **{k: f[k] for k in keys})
    if m == "awq":
        return lambda w, rng: writers.awq_gemm(w, group_size=f["group_size"])
    if m == "ct-int4":
        return lambda w, rng: writers.ct_pack_int4(w, strategy=f["strategy"], group_size=f["group_size"],
                                                   symmetric=f["symmetric"], actorder=f["actorder"], rng=rng)
    if m == "ct-int8":
        return lambda w, rng: writers.ct_int8_channel(w)
    if m in ("ct-w4a8", "ct-w4afp8"):
        return lambda w, rng: writers.ct_int4_naive(w, group_size=f["group_size"], symmetric=f["symmetric"])
    if m == "ct-fp8":
        return lambda w, rng: writers.ct_fp8_channel(w)
    if m == "ct-fp8-block":
        return lambda w, rng: writers.ct_fp8_block(w)
    if m == "ct-int8-static":
        return lambda w, rng: {**writers.ct_int8_channel(w), **writers.static_input_scale(rng, 127.5)}
    if m == "ct-fp8-static":
        return lambda w, rng: {**writers.ct_fp8_tensor(w), **writers.static_input_scale(rng, 448.0)}
    if m == "fp8-block":
        return lambda w, rng: writers.fp8_block(w)
    raise ValueError(m)
