#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""The hybrid models' quantized forms against transformers on the dequantized weights.

  run_hybrid_format_tests.py --metrale PATH [--model NAME ...] [--form NAME ...] [--keep DIR]

For qwen3_5_text and qwen3_next, the tiny bf16 checkpoint run_hybrid_tests.py writes with
transformers (save_pretrained, randomised) is quantized the way the tools write it (writers.py,
formats.py), in these forms:

  ct-w4a16-deltanet-bf16   llm-compressor W4A16 (pack-quantized, int4 group 128, symmetric; GPTQ
                           or RTN store alike) with its Qwen3-Next / Qwen3.5 recipes' ignore list:
                           lm_head, the whole DeltaNet (re:.*linear_attn.*), the router and the
                           shared-expert gate.
  ct-w4a16-ab-bf16         the same, the DeltaNet's in_proj_qkv(z)/in_proj_z/out_proj quantized and
                           only in_proj_a/in_proj_b (Qwen3-Next: in_proj_ba) ignored.
  ct-w4a16-all             W4A16 with only lm_head and the routers ignored: a and b (4 and 8 rows)
                           quantized too, as the scheme's default ignore list leaves them.
  fp8-block                the publishers' block FP8 (quant_method fp8, weight_block_size
                           [128, 128], F32 weight_scale_inv), with modules_to_not_convert as Qwen's
                           FP8 releases list it: lm_head, and per layer in_proj_a/in_proj_b
                           (Qwen3-Next: in_proj_ba), the router and the shared-expert gate, in bf16.
  fp8-block-ab             block FP8 with in_proj_a/in_proj_b (in_proj_ba) quantized too: a
                           4- (8-) row weight is one partial 128-row block, which the format allows.

Everything the quantization_config does not cover (embeddings, norms, conv1d, A_log, dt_bias) stays
as transformers saved it. The reference is transformers (float32, and bf16 for its own spread) on
an F32 checkpoint of the weights decoded back from the quantized files (decoders.py: each tool's
own dequantization; transformers cannot load compressed-tensors without its package). metrale
generate's greedy ids must be the reference's choices, teacher-forced with run_hybrid_tests'
near-tie rule, for prompts of 1 and 37 tokens. Every form runs W·A16 (--activation-quantization
bf16); block FP8 also runs under the tier it declares (FP8 activations per 128 columns, dynamic),
against transformers with the same activation quantization applied to each FP8 module's input
(FineGrainedFP8's: s = amax / 448 and x / s in f32, cast to e4m3). Exit 1 naming every failure;
77 when torch or transformers is missing or the CPU backend is not loaded.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np
    import torch
    import transformers  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (the hybrid format tests need torch and transformers; .ci/test-all makes .venv-transformers)")
    sys.exit(77)

import decoders  # noqa: E402
import formats  # noqa: E402
import run_hybrid_tests as hybrid  # noqa: E402
from safetensors_np import load_checkpoint, save, tensor  # noqa: E402

MODELS = ("qwen3_5_text", "qwen3_next")
FORMS = ("ct-w4a16-deltanet-bf16", "ct-w4a16-ab-bf16", "ct-w4a16-all", "fp8-block", "fp8-block-ab")
PROMPT_LENGTHS = (1, 37)
ROUTERS = ["re:.*mlp.gate$", "re:.*mlp.shared_expert_gate$"]


def ab_modules(name):
    """The DeltaNet's a/b projections: Qwen3.5's in_proj_a and in_proj_b, Qwen3-Next's in_proj_ba."""
    return ["in_proj_ba"] if name == "qwen3_next" else ["in_proj_a", "in_proj_b"]


def linear_modules(tensors):
    """The linear layers of the language model: every 2-D `.weight` but the embedding."""
    return sorted(n[:-len(".weight")] for n, t in tensors.items()
                  if n.endswith(".weight") and t.data.ndim == 2 and "embed_tokens" not in n)


def quantization_config(form, name, modules):
    """The config.json quantization_config the tool writes for `form`."""
    if form.startswith("ct-"):
        deltanet = {"ct-w4a16-deltanet-bf16": ["re:.*linear_attn.*"], "ct-w4a16-all": []}.get(
            form, [f"re:.*{m}$" for m in ab_modules(name)])
        q = formats.quantization_config({"method": "ct-int4"}, name)
        q["ignore"] = ["lm_head"] + deltanet + ROUTERS
        return q
    q = formats.quantization_config({"method": "fp8-block"}, name)
    keep = ("mlp.gate", "mlp.shared_expert_gate") + (() if form == "fp8-block-ab" else tuple(f"linear_attn.{m}" for m in ab_modules(name)))
    # Qwen's FP8 releases name each module whole: lm_head, then model.layers.L.<module>.
    q["modules_to_not_convert"] = ["lm_head"] + [m for m in modules if any(m.endswith("." + k) for k in keep)]
    return q


def left_in_float(q, module):
    """Whether the tool leaves `module` unquantized under q (compressed-tensors: `ignore` by name or
    re.match; block FP8: modules_to_not_convert, substrings as transformers matches them)."""
    if q["quant_method"] == "compressed-tensors":
        return any(re.match(p[3:], module) if p.startswith("re:") else p == module for p in q["ignore"])
    return any(key in module for key in q.get("modules_to_not_convert") or [])


def write_quantized(root, form, name, bf16_dir):
    """The checkpoint the tool writes from the bf16 one: config.json with its quantization_config,
    model.safetensors with each covered module quantized and the rest as saved."""
    tensors = load_checkpoint(bf16_dir)
    modules = linear_modules(tensors)
    q = quantization_config(form, name, modules)
    out = {n: t for n, t in tensors.items() if not any(n == m + ".weight" for m in modules)}
    quantized = 0
    for m in modules:
        t = tensors[m + ".weight"]
        if left_in_float(q, m):
            out[m + ".weight"] = t
            continue
        w = decoders.float_values(t)
        parts = formats.writers.ct_pack_int4(w, group_size=128) if form.startswith("ct-") else formats.writers.fp8_block(w)
        out.update({f"{m}.{suffix}": v for suffix, v in parts.items()})
        quantized += 1
    d = os.path.join(root, f"{name}-{form}")
    os.makedirs(d, exist_ok=True)
    config = json.load(open(os.path.join(bf16_dir, "config.json")))
    config["quantization_config"] = q
    json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=2)
    save(os.path.join(d, "model.safetensors"), out, {"format": "pt"})
    return d, quantized, len(modules) - quantized


def write_dequantized(quant_dir):
    """An F32 checkpoint transformers loads: every tensor of the quantized files, each quantized
    module decoded from its stored codes and scales by the tool's own dequantization."""
    config = json.load(open(os.path.join(quant_dir, "config.json")))
    q = config.pop("quantization_config")
    config["dtype"] = "float32"
    tensors = load_checkpoint(quant_dir)
    suffixes = ("weight_packed", "weight_scale", "weight_shape", "weight_scale_inv")
    prefixes = {n.rsplit(".", 1)[0] for n in tensors if n.rsplit(".", 1)[1] in suffixes}
    out = {}
    for n, t in tensors.items():
        prefix, suffix = n.rsplit(".", 1)
        if prefix in prefixes:
            if suffix in ("weight_packed", "weight_scale_inv") or (suffix == "weight" and t.dtype == "F8_E4M3"):
                w = decoders.decode(lambda s, p=prefix: tensors[f"{p}.{s}"], q)
                out[prefix + ".weight"] = tensor("F32", w.astype(np.float32))
            continue
        out[n] = tensor("F32", decoders.float_values(t).astype(np.float32))
    d = quant_dir.rstrip("/") + "-dequantized"
    os.makedirs(d, exist_ok=True)
    json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=2)
    save(os.path.join(d, "model.safetensors"), out, {"format": "pt"})
    return d, prefixes


def fp8_activations(model, modules):
    """FineGrainedFP8's dynamic activation quantization on the inputs of `modules` (names as the
    checkpoint's): per row and 128 columns, s = amax / 448 and x / s in f32, cast to e4m3."""
    def quantize(_module, args):
        x = args[0]
        shape = x.shape
        g = x.float().reshape(*shape[:-1], shape[-1] // 128, 128)
        s = g.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 448.0
        y = (g / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s
        return (y.reshape(shape).to(x.dtype),)
    named = dict(model.named_modules())
    for m in modules:
        named[m].register_forward_pre_hook(quantize)
    return model


def reference_models(dequantized):
    return {dt: hybrid.load(dequantized, dt).eval() for dt in (torch.float32, torch.bfloat16)}


def check_runs(metrale, label, quant_dir, models, prompts, extra):
    failures = []
    for prompt in prompts:
        what = f"{label}: prompt of {len(prompt)}"
        try:
            ids = hybrid.metrale_generate(metrale, quant_dir, [prompt], extra)[0]
        except RuntimeError as e:
            print(f"FAIL {what}: {e}")
            failures.append(f"{what}: {e}")
            continue
        wrong, ties = hybrid.teacher_forced(models, prompt, ids)
        if not wrong and ties > hybrid.NEW_TOKENS // 4:
            wrong = f"{ties} near-ties of {hybrid.NEW_TOKENS}: too flat to judge"
        print(f"{'FAIL' if wrong else 'ok  '} {what}: {len(ids)} ids, {ties} near-tie(s) excused" + (f": {wrong}" if wrong else ""))
        if wrong:
            failures.append(f"{what}: {wrong}")
    return failures


def corrupt(quant_dir, module, factor):
    """The self-check (--corrupt): `module`'s scales multiplied by `factor` in the quantized files
    only, after the reference was decoded, as a loader misreading them would; the form must fail."""
    path = os.path.join(quant_dir, "model.safetensors")
    tensors = load_checkpoint(quant_dir)
    name = next(f"{module}.{s}" for s in ("weight_scale", "weight_scale_inv") if f"{module}.{s}" in tensors)
    t = tensors[name]
    tensors[name] = (tensor("F32", t.data * factor) if t.dtype == "F32"
                     else formats.writers._store_float(decoders.float_values(t) * factor, t.dtype))
    save(path, tensors, {"format": "pt"})
    print(f"corrupted {name} (x{factor}): this form must fail")


def check_form(metrale, root, name, form, bf16_dir, prompts, corruption=None):
    quant_dir, quantized, kept = write_quantized(root, form, name, bf16_dir)
    dequantized, prefixes = write_dequantized(quant_dir)
    if corruption:
        corrupt(quant_dir, *corruption)
    label = f"{name} {form} ({quantized} modules quantized, {kept} in bf16)"
    failures = check_runs(metrale, label + " W·A16", quant_dir, reference_models(dequantized), prompts,
                          ("--activation-quantization", "bf16"))
    if form.startswith("fp8"):
        # The tier the checkpoint declares (dynamic FP8 activations), against the same quantization
        # of each FP8 module's input in transformers. The names map to transformers' modules one to one.
        models = reference_models(dequantized)
        named = dict(models[torch.float32].named_modules())
        if all(p in named for p in prefixes):
            for m in models.values():
                fp8_activations(m, sorted(prefixes))
            failures += check_runs(metrale, label + " declared tier (FP8 activations)", quant_dir, models, prompts, ())
        else:  # transformers 5 holds the experts as one module of 3-D parameters: no input per expert to quantize
            print(f"skip {label} declared tier: transformers runs the experts fused, without a module per expert's input")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metrale", required=True)
    ap.add_argument("--model", action="append", default=[], choices=MODELS)
    ap.add_argument("--form", action="append", default=[], choices=FORMS)
    ap.add_argument("--keep")
    ap.add_argument("--corrupt", nargs=2, metavar=("MODULE", "FACTOR"),
                    help="self-check: multiply MODULE's scales by FACTOR in the quantized files after the reference "
                         "is decoded (e.g. model.layers.1.self_attn.q_proj 2); every run of the forms quantizing it must fail")
    a = ap.parse_args()
    if not hybrid.cpu_backend_loaded(a.metrale):
        print("skipped: the CPU backend is not loaded")
        return 77
    root = a.keep or tempfile.mkdtemp(prefix="metrale-hybrid-formats-")
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(11)
    prompts = [rng.integers(0, hybrid.VOCAB, n).tolist() for n in PROMPT_LENGTHS]
    failures = []
    try:
        for name in a.model or MODELS:
            bf16_dir = hybrid.write_model(root, name)
            for form in a.form or FORMS:
                corruption = (a.corrupt[0], float(a.corrupt[1])) if a.corrupt else None
                failures += check_form(a.metrale, root, name, form, bf16_dir, prompts, corruption)
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print("failed:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
