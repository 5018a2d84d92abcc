# SPDX-License-Identifier: MIT OR Apache-2.0
"""Writes a whole small checkpoint directory for one variant: config.json (with the format's
quantization_config), the tool's sidecar files, and the weights (one file, or shards with
model.safetensors.index.json): embeddings, norms, attention and FFN of every decoder layer, the
FFN and attention quantized as the tool quantizes them, routers and gates left in the model dtype.
"""
import json
import os
import zlib
from dataclasses import dataclass, field
from typing import Dict

import numpy as np

import formats
import models
import writers
from numerics import bf16_bits, f32_to_bf16_bits
from safetensors_np import Tensor, save, save_sharded, tensor


@dataclass
class Variant:
    name: str
    family: str
    arch: str
    fmt: Dict
    layer: int = 1
    shards: int = 1
    notes: str = ""
    extra: Dict = field(default_factory=dict)  # "layout": models.LAYOUTS (default "tf4")

    @property
    def layout(self) -> str:
        return self.extra.get("layout", "tf4")


def rng_for(variant: str, what: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(f"{variant}/{what}".encode()))


def random_weight(variant: str, module: str, n: int, k: int, asym: bool) -> np.ndarray:
    """Float weights of unit output spread for inputs in [-1, 1); with `asym`, a per-row offset so
    asymmetric quantizers get zero points well away from the middle."""
    rng = rng_for(variant, module)
    w = rng.standard_normal((n, k)) * (rng.uniform(0.5, 1.5, (n, 1)) * np.sqrt(3.0 / k))
    if asym:
        w += rng.uniform(-0.6, 0.6, (n, 1)) * np.sqrt(3.0 / k)
    return w


def linear_modules(config: Dict, v: Variant) -> Dict[str, tuple]:
    """Every linear module of the model the format quantizes (or keeps in float): name -> (N, K)."""
    out = {}
    for layer in range(config["num_hidden_layers"]):
        out.update(models.other_modules(config, layer))
        ffn = models.ffn_layout(config, layer, layout=v.layout)
        w = models.widths(config, ffn)
        H = config["hidden_size"]

        def add(names, inter):
            gate, up, down = names
            out[gate] = (inter, H)
            out[up] = (inter, H)
            out[down] = (H, inter)

        if ffn.kind == "dense":
            add(ffn.dense, w["dense"])
        else:
            if formats.quantizes_router(v.fmt, v.arch):
                out[ffn.router] = (len(ffn.experts), H)
            for names in ffn.experts:
                add(names, w["expert"])
            if ffn.shared:
                add(ffn.shared, w["shared"])
    return out


def _floats(config: Dict, v: Variant, dtype: str) -> Dict[str, Tensor]:
    """Embeddings, norms, lm_head, routers and shared-expert gates, in the model dtype."""
    H = config["hidden_size"]
    store = (lambda a: Tensor("BF16", bf16_bits(a))) if dtype == "BF16" else (lambda a: tensor("F16", a))
    out = {"model.embed_tokens.weight": store(rng_for(v.name, "embed").normal(0, 0.02, (config["vocab_size"], H))),
           "lm_head.weight": store(rng_for(v.name, "lm_head").normal(0, 0.02, (config["vocab_size"], H))),
           "model.norm.weight": store(np.ones(H))}
    amplitude = 4.5 / np.sqrt(H)
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        out[p + "input_layernorm.weight"] = store(rng_for(v.name, p + "ln1").uniform(0.8, 1.2, H))
        out[p + "post_attention_layernorm.weight"] = store(rng_for(v.name, p + "ln2").uniform(0.8, 1.2, H))
        ffn = models.ffn_layout(config, layer, layout=v.layout)
        if ffn.router and not formats.quantizes_router(v.fmt, v.arch):
            r = rng_for(v.name, ffn.router).uniform(-amplitude, amplitude, (len(ffn.experts), H))
            out[ffn.router + ".weight"] = store(r)
        if ffn.shared_gate:
            out[ffn.shared_gate + ".weight"] = store(rng_for(v.name, ffn.shared_gate).uniform(-amplitude, amplitude, (1, H)))
    return out


def same_input(module: str) -> str:
    """GPTQ's act-order permutation comes from the Hessian of a layer's inputs; gate and up read the
    same input, so they get the same statistics, hence the same permutation (metrale and vLLM both
    rely on it: the fused gate/up projection reads one input order)."""
    for up, gate in ((".up_proj", ".gate_proj"), (".w3", ".w1")):
        if module.endswith(up):
            return module[: -len(up)] + gate
    return module


def fuse_experts(config: Dict, v: Variant, tensors: Dict[str, Tensor]) -> None:
    """transformers 5's expert modules, as FineGrainedFP8 saves them: per layer
    <block>experts.gate_up_proj F8_E4M3 [E, 2I, H] (each expert's gate rows, then its up rows) with
    gate_up_proj_scale_inv F32 [E, 2I/128, H/128], and experts.down_proj [E, H, I] with
    down_proj_scale_inv [E, H/128, I/128]; the per-expert tensors they replace are removed."""
    if v.fmt["method"] != "fp8-block":
        raise ValueError("transformers 5 writes fused experts quantized only as block FP8 (FineGrainedFP8)")
    for layer in range(config["num_hidden_layers"]):
        ffn = models.ffn_layout(config, layer, layout=v.layout)
        if ffn.kind != "moe":
            continue
        experts = ffn.experts[0][0].rsplit(".", 2)[0] + "."  # "...mlp.experts."
        parts = {"gate_up_proj": [], "down_proj": []}
        for gate, up, down in ffn.experts:
            parts["gate_up_proj"].append([tensors.pop(f"{m}.{leaf}") for m in (gate, up) for leaf in ("weight", "weight_scale_inv")])
            parts["down_proj"].append([tensors.pop(f"{down}.{leaf}") for leaf in ("weight", "weight_scale_inv")])
        for name, per_expert in parts.items():
            weights = [np.concatenate([t.data for t in e[0::2]], axis=0) for e in per_expert]
            scales = [np.concatenate([t.data for t in e[1::2]], axis=0) for e in per_expert]
            tensors[experts + name] = Tensor("F8_E4M3", np.stack(weights))
            tensors[experts + name + "_scale_inv"] = tensor("F32", np.stack(scales))


def write_checkpoint(directory: str, v: Variant) -> None:
    os.makedirs(directory, exist_ok=True)
    config = models.config_json(v.arch, formats.model_dtype(v.fmt))
    if v.layout != "tf4":
        config["transformers_version"] = "5.0.0"
    declared = formats.quantization_config(v.fmt, v.arch)
    if declared is not None:  # save_pretrained of an unquantized model writes none
        config["quantization_config"] = declared
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    weights_file, sidecars = formats.files(v.fmt, v.arch)
    for name, doc in sidecars.items():
        with open(os.path.join(directory, name), "w") as f:
            json.dump(doc, f, indent=2)
    dtype = formats.float_dtype(v.fmt)
    tensors = _floats(config, v, dtype)
    quantize = formats.quantizer(v.fmt)
    asym = not formats.resolved(v.fmt).get("sym", formats.resolved(v.fmt).get("symmetric", True))
    for module, (n, k) in linear_modules(config, v).items():
        w = random_weight(v.name, module, n, k, asym)
        if formats.left_unquantized(v.fmt, v.arch, module):
            parts = writers.plain(w, dtype)
        else:
            parts = quantize(w, rng_for(v.name, same_input(module) + "/perm"))
        for suffix, t in parts.items():
            tensors[f"{module}.{suffix}"] = t
    if v.layout == "fused":
        fuse_experts(config, v, tensors)
    meta = formats.metadata(v.fmt)
    if v.shards > 1:
        save_sharded(directory, tensors, v.shards, meta)
    else:
        save(os.path.join(directory, weights_file), tensors, meta)


INPUT_DTYPES = ("BF16", "F16", "F32")


def write_input(path: str, variant: str, m: int, dtype: str) -> None:
    """x [m, hidden]: uniform in [-1, 1), stored as `dtype` (metrale rounds F16/F32 to bf16)."""
    x = rng_for(variant, f"x/{m}").uniform(-1.0, 1.0, (m, models.HIDDEN))
    if dtype == "BF16":
        t = Tensor("BF16", bf16_bits(x))
    elif dtype == "F16":
        t = tensor("F16", x)
    else:
        t = tensor("F32", x)
    save(path, {"x": t})


def input_as_bf16(t: Tensor) -> np.ndarray:
    """The bf16 bits metrale runs for a stored input tensor (round to nearest even, once)."""
    if t.dtype == "BF16":
        return t.data
    return f32_to_bf16_bits(t.data.astype(np.float32))  # f16 -> f32 is exact
