#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""What a checkpoint declares rules (docs/checkpoint-formats.md, docs/quantization.md):

- a GPTQ checkpoint declaring sym: false whose stored zeros are all 8 runs as asymmetric (the
  zero-point family w4a16_zp), never as the symmetric W4A16 format its values happen to allow;
- a tensor that contradicts the declaration (zero points under sym: true, a permuted g_idx under
  desc_act: false or actorder "static", codes of other bits, other groups) and every unsupported
  value or layout (bits 3, an unknown quant_method, AWQ's GEMV layout, an unknown actorder,
  static per-channel activation scales, FP8 blocks other than 128x128, experts under names no
  transformers version writes) make `metrale run` exit 3 with one line naming the tensor or the
  field, and with --json the same message as {"error", "status", "exit": 3} on stdout;
- a declared tensor that is missing (actorder "group" without weight_g_idx) exits 1, its JSON
  object saying so;
- `metrale audit --weights` resolves a checkpoint's layer in the formats its weights hold and at
  the activation tier it declares.

Usage: test_declarations.py <path to metrale>. Exit 77 when the CPU backend is not loaded."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build  # noqa: E402
from variants import variants  # noqa: E402

METRALE = sys.argv[1]
failures = []


def variant(family, name_part):
    return next(v for v in variants(family) if name_part in v.name)


def checkpoint(root, family, name_part, edit=None):
    """The variant's checkpoint in a fresh directory, its quantization_config edited by `edit`."""
    v = variant(family, name_part)
    directory = tempfile.mkdtemp(dir=root)
    build.write_checkpoint(directory, v)
    if edit:
        path = os.path.join(directory, "config.json")
        with open(path) as f:
            config = json.load(f)
        edit(config["quantization_config"])
        with open(path, "w") as f:
            json.dump(config, f)
    return directory, v.layer


def sidecar_only(directory, edit):
    """The checkpoint with its GPTQ settings only in quantize_config.json (as older AutoGPTQ
    releases leave them), edited by `edit`."""
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.pop("quantization_config", None)
    with open(path, "w") as f:
        json.dump(config, f)
    sidecar = os.path.join(directory, "quantize_config.json")
    with open(sidecar) as f:
        settings = json.load(f)
    edit(settings)
    with open(sidecar, "w") as f:
        json.dump(settings, f)
    return directory


def run(directory, layer, *extra):
    return subprocess.run([METRALE, "run", "--quiet", "--weights", directory, "--layer", str(layer), "--json", *extra],
                          capture_output=True, text=True)


def json_error(what, proc, code):
    """The --json error object on stdout: its exit is the process's, its message the log line's."""
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        failures.append(f"{what}: stdout is not one JSON object: {proc.stdout[:300]!r}")
        return {}
    if doc.get("exit") != code or not doc.get("error") or not doc.get("status") or doc["error"] not in proc.stderr:
        failures.append(f"{what}: JSON error object {doc} does not match exit {code} / stderr {proc.stderr[-600:]}")
    return doc


def expect_failure(what, code, directory, layer, *needles):
    proc = run(directory, layer)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    before = len(failures)
    if proc.returncode != code:
        failures.append(f"{what}: exit {proc.returncode}, expected {code}\n{proc.stderr[-1500:]}")
    elif len(lines) != 1:
        failures.append(f"{what}: {len(lines)} lines on stderr, expected one:\n{proc.stderr[-1500:]}")
    else:
        missing = [n for n in needles if n not in lines[0]]
        if missing:
            failures.append(f"{what}: the message does not name {missing}: {lines[0]}")
        json_error(what, proc, code)
    print(f"{'ok  ' if len(failures) == before else 'FAIL'} {what}: {lines[0] if lines else ''}")


def expect_refusal(what, directory, layer, *needles):
    expect_failure(what, 3, directory, layer, *needles)


def rewritten(directory, edit):
    """The checkpoint's tensors as edit({name: tensor}) leaves them."""
    from safetensors_np import load, save
    for name in os.listdir(directory):
        if name.endswith(".safetensors"):
            path = os.path.join(directory, name)
            save(path, edit(load(path)))
    return directory


def renamed(directory, old, new):
    """The checkpoint's tensors renamed (every `old` in a name becomes `new`), as another tool
    might have named them."""
    from safetensors_np import load, save
    for name in os.listdir(directory):
        if name.endswith(".safetensors"):
            path = os.path.join(directory, name)
            save(path, {k.replace(old, new): t for k, t in load(path).items()})
    return directory


def main():
    probe = subprocess.run([METRALE, "--json", "list"], capture_output=True, text=True)
    if '"cpu"' not in probe.stdout:
        print("skipped: the CPU backend is not loaded")
        return 77
    with tempfile.TemporaryDirectory() as root:
        # Declared asymmetric, every zero 8: the zero-point family, not W4A16.
        directory, layer = checkpoint(root, "gptq-asym", "v1-all-zeros-8")
        proc = run(directory, layer, "--check")
        report = json.loads(proc.stdout) if proc.returncode == 0 else {}
        tiers = " ".join(report.get("tiers", []))
        if proc.returncode != 0 or "w4a16_zp" not in tiers or "asymmetric" not in report["weights"]["quantization"]:
            failures.append(f"sym=false with zeros 8: expected the w4a16_zp family, got exit {proc.returncode}, "
                            f"tiers {tiers!r}\n{proc.stderr[-800:]}")
        print(f"ok   sym=false, zeros all 8: {tiers}")

        # `metrale audit --weights` resolves the layer as `metrale run` does, in the formats its
        # weights hold and at the activation tier the checkpoint declares.
        for family, part, want in (("gptq-asym", "v1-all-zeros-8", "w4a16_zp"), ("gptq-act-order", "v1-autogptq", "gather"),
                                   ("ct-int8", "qwen3", "quant/quantize_int8_bf16"),
                                   ("ct-int8-static", "tensor-qwen3", "quant/quantize_int8_static_bf16"),
                                   ("ct-fp8-static", "tensor-qwen3", "quant/quantize_fp8_static_bf16"),
                                   ("ct-fp8", "channel-qwen3", "fp8/fp8_gemm_a8 fp8/fp8"),
                                   ("ct-w4afp8", "group-sym-qwen3", "w4afp8/w4afp8_gemm fp8/w4afp8"),
                                   ("fp8-block", "e4m3-qwen3", "quant/quantize_fp8_group128 ")):
            directory, layer = checkpoint(root, family, part)
            audit = subprocess.run([METRALE, "--json", "audit", "--weights", directory, "--layer", str(layer)],
                                   capture_output=True, text=True)
            rows = json.loads(audit.stdout)["rows"] if audit.returncode == 0 else []
            seen = " ".join(f"{r.get('module')}/{r.get('kernel')} {r.get('annotations', {}).get('tier', '')}" for r in rows)
            if audit.returncode != 0 or want not in seen:
                failures.append(f"audit --weights of {family}: expected '{want}' in the rows, got exit {audit.returncode}: "
                                f"{seen[:600]}\n{audit.stderr[-800:]}")
            else:
                print(f"ok   audit --weights {family}: {len(rows)} rows, '{want}' among them")

        # Block FP8 declares FP8 activations per 128 columns, as compressed-tensors computes them:
        # the tier note says so, and the quantizer and GEMMs are the group-128 ones.
        directory, layer = checkpoint(root, "ct-fp8-block", "qwen3")
        audit = subprocess.run([METRALE, "--json", "audit", "--weights", directory, "--layer", str(layer)],
                               capture_output=True, text=True)
        notes = [r.get("annotations", {}).get("tier_note", "") for r in json.loads(audit.stdout)["rows"]] \
            if audit.returncode == 0 else []
        kernels = [r.get("kernel", "") for r in json.loads(audit.stdout)["rows"]] if audit.returncode == 0 else []
        if not any("fp8 activations per 128 columns, bf16 arithmetic" in n for n in notes) or \
                not any(k.endswith("quantize_fp8_group128_bf16") for k in kernels) or \
                not any(k.endswith("fp8_gemm_a8_group128") for k in kernels):
            failures.append(f"audit --weights of ct-fp8-block: no tier note names the group-128 declaration: "
                            f"exit {audit.returncode}, {notes[:4]}\n{audit.stderr[-800:]}")
        else:
            print("ok   audit --weights ct-fp8-block: the tier note names the group-128 declaration")

        # Declaration vs tensors.
        expect_refusal("sym=true over asymmetric zeros", *checkpoint(root, "gptq-asym", "v2-qwen3", lambda q: q.update(sym=True)),
                       "qzeros", "quantization_config.sym = true")
        expect_refusal("desc_act=false over a permuted g_idx",
                       *checkpoint(root, "gptq-act-order", "v1-autogptq", lambda q: q.update(desc_act=False)),
                       "g_idx", "quantization_config.desc_act = false")
        expect_refusal("bits=8 over 4-bit codes", *checkpoint(root, "gptq", "v2-qwen3", lambda q: q.update(bits=8)),
                       "qweight", "quantization_config.bits = 8")
        expect_refusal("group_size=64 over group-128 scales", *checkpoint(root, "gptq", "v2-qwen3", lambda q: q.update(group_size=64)),
                       "scales", "quantization_config.group_size = 64")
        # Values metrale does not run.
        # Settings read from quantize_config.json are named as fields of that file.
        directory, layer = checkpoint(root, "gptq", "v1-autogptq-qwen3")
        expect_refusal("bits=8 over 4-bit codes, from quantize_config.json",
                       sidecar_only(directory, lambda q: q.update(bits=8)), layer, "qweight", "holds 4-bit codes", "bits (quantize_config.json) = 8")
        if "quantization_config.bits" in run(directory, layer).stderr:
            failures.append("a setting from quantize_config.json is named quantization_config.bits")
        expect_refusal("bits=3", *checkpoint(root, "gptq", "v2-qwen3", lambda q: q.update(bits=3)),
                       "quantization_config.bits = 3", "4 or 8 bits")
        expect_refusal("unknown quant_method", *checkpoint(root, "gptq", "v2-qwen3", lambda q: q.update(quant_method="hqq")),
                       "quant_method = \"hqq\"", "gptq, awq, compressed-tensors or fp8")
        expect_refusal("AWQ GEMV", *checkpoint(root, "awq", "qwen3", lambda q: q.update(version="gemv")),
                       "quantization_config.version = \"gemv\"")

        def weights(**kw):
            def edit(q):
                for group in q["config_groups"].values():
                    group["weights"].update(kw)
            return edit
        expect_refusal("compressed-tensors actorder \"bogus\"", *checkpoint(root, "ct-int4", "qwen3", weights(actorder="bogus")),
                       "weights.actorder = \"bogus\" is not supported")
        expect_refusal("actorder \"static\" over a permuted weight_g_idx",
                       *checkpoint(root, "ct-act-order", "group-sym-qwen3", weights(actorder="static")),
                       "weight_g_idx", "weights.actorder = ")
        expect_failure("actorder \"group\" without weight_g_idx", 1,
                       *checkpoint(root, "ct-int4", "group-sym-qwen3", weights(actorder="group")), "weight_g_idx", "missing")

        def static_channel_activations(q):
            for group in q["config_groups"].values():
                group["input_activations"] = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                                              "dynamic": False, "group_size": None, "observer": "minmax"}
        expect_refusal("static per-channel activation scales",
                       *checkpoint(root, "ct-int8", "qwen3", static_channel_activations),
                       "input_activations.strategy = \"channel\" is not supported")
        # Static per-tensor scales: each module's input_scale, one BF16 value, gate's equal to up's.
        from numerics import bf16_bits, bf16_value
        from safetensors_np import Tensor

        def edit_scale(suffix, change):
            def edit(ts):
                for name in [n for n in ts if n.endswith(suffix + ".input_scale")]:
                    ts[name] = change(ts[name])
                return ts
            return edit
        doubled = edit_scale("up_proj", lambda t: Tensor("BF16", bf16_bits(bf16_value(t.data) * 2)))
        directory, layer = checkpoint(root, "ct-int8-static", "tensor-qwen3")
        expect_refusal("gate and up with different static scales", rewritten(directory, doubled), layer,
                       "gate_proj.input_scale = ", "up_proj.input_scale = ", "differ")
        directory, layer = checkpoint(root, "ct-fp8-static", "tensor-qwen3")
        as_f32 = edit_scale("down_proj", lambda t: Tensor("F32", bf16_value(t.data).astype("float32")))
        expect_refusal("a static scale stored as F32", rewritten(directory, as_f32), layer, "down_proj.input_scale",
                       "stored as F32", "BF16")
        directory, layer = checkpoint(root, "ct-fp8-static", "tensor-qwen3")
        per_channel = edit_scale("down_proj", lambda t: Tensor("BF16", bf16_bits([bf16_value(t.data)[0]] * 384)))
        expect_refusal("a static scale per channel", rewritten(directory, per_channel), layer, "down_proj.input_scale",
                       "input_activations.strategy = \"tensor\"", "384 scales")
        directory, layer = checkpoint(root, "ct-int8-static", "tensor-qwen3")
        rewritten(directory, lambda ts: {k: t for k, t in ts.items() if not k.endswith("down_proj.input_scale")})
        expect_refusal("a static scale missing", directory, layer, "down_proj.input_scale is missing", "\"dynamic\": false")
        directory, layer = checkpoint(root, "moe-names", "gptq-mixtral")
        expect_refusal("Mixtral experts named fc1/fc2/fc3", renamed(renamed(renamed(directory, ".w1.", ".fc1."), ".w2.", ".fc2."),
                                                                    ".w3.", ".fc3."), layer,
                       f"layer {layer}", "experts.0.fc1", "layout metrale does not read")
        # transformers 5's fused expert tensors: read as block FP8 only.
        def as_gptq(q):
            q.clear()
            q.update(quant_method="gptq", bits=4, group_size=128, sym=True, desc_act=False)
        expect_refusal("fused experts declared GPTQ", *checkpoint(root, "fp8-block", "fused-qwen3_moe", as_gptq),
                       "experts.gate_up_proj", "fused expert tensors", "not supported under gptq")
        directory, layer = checkpoint(root, "fp8-block", "fused-qwen3_moe")
        rewritten(directory, lambda ts: {k: t for k, t in ts.items() if not k.endswith("_proj_scale_inv")})
        expect_refusal("fused experts left in float", directory, layer, "experts.gate_up_proj", "not block-FP8 quantized")
        expect_refusal("FP8 blocks of 64", *checkpoint(root, "fp8-block", "qwen3", lambda q: q.update(weight_block_size=[64, 64])),
                       "weight_block_size", "[128, 128]")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
