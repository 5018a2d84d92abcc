#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""End-to-end checkpoint tests: for every variant of the chosen format families, write a small
checkpoint exactly as its tool writes it, write inputs x [m, hidden] (m = 1, 5, 40; BF16, F16 and
F32 across cases), run

    metrale run --weights DIR --layer N --input x.safetensors --output y.safetensors --quiet --json

and compare y with the float64 output computed from the checkpoint files alone (expected.py), to
the per-element budget of docs/layers.md. One line per case; exit 1 naming every failed case.

Families (docs/checkpoint-formats.md describes each format):
{families}

Enabled in meson's `checkpoints` suite: {enabled}.

Modes:
  run_checkpoint_tests.py --metrale PATH --family gptq [--family awq ...] [--arch qwen3,qwen3_moe]
  run_checkpoint_tests.py --self-test [--family ...]   the writers and decoders agree (no metrale)
  run_checkpoint_tests.py --write DIR [--family ...]   checkpoints, inputs and expected outputs
  run_checkpoint_tests.py --list [--family ...]        the variants
With --activations format the expectation quantizes each projection's inputs as the checkpoint's
config asks (int8 or FP8 per token, FP8 per 128 columns) for kernels that run W8A8 / FP8 A8; its
budget adds four quantization steps per dot product and is looser (a one-ulp change of a row's
largest intermediate moves its scale and so many codes).
Exit 77 (skip) when the chosen backend is not loaded.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np  # noqa: E402
except ImportError:
    print(f"{sys.executable}: numpy is missing (Debian: python3-numpy, which .ci/setup installs)", file=sys.stderr)
    sys.exit(1)

import build  # noqa: E402
import expected  # noqa: E402
import formats  # noqa: E402
import models  # noqa: E402
from numerics import bf16_value  # noqa: E402
from safetensors_np import Tensor, load, save  # noqa: E402
from variants import ENABLED, FAMILIES, variants  # noqa: E402

ROWS = (1, 5, 40)


def cases(v_index: int):
    """(m, input dtype) of a variant: every dtype appears for every m across variants."""
    return [(m, build.INPUT_DTYPES[(v_index + j) % 3]) for j, m in enumerate(ROWS)]


def run_metrale(args, ckpt: str, layer: int, x_path: str, y_path: str):
    cmd = [args.metrale, "run", "--weights", ckpt, "--layer", str(layer), "--input", x_path, "--output", y_path,
           "--quiet", "--json", "--repeat", "1", "--warmup", "0"]
    if args.backend:
        cmd += ["--backend", args.backend]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def read_output(path: str, m: int) -> np.ndarray:
    y = load(path)["y"]
    if y.dtype != "BF16" or list(y.data.shape) != [m, models.HIDDEN]:
        raise ValueError(f"{path}: tensor 'y' is {y.dtype} {list(y.data.shape)}, expected BF16 [{m}, {models.HIDDEN}]")
    return bf16_value(y.data)


def check_variant(args, v, index: int, tmp: str) -> list:
    """Runs every case of one variant; returns the names of the failed cases."""
    ckpt = os.path.join(tmp, "ckpt")
    build.write_checkpoint(ckpt, v)
    ck = expected.Checkpoint(ckpt, args.activations)
    failed = []
    for m, dtype in cases(index):
        case = f"{v.name} layer {v.layer} m={m} x {dtype}"
        x_path, y_path = os.path.join(tmp, f"x{m}.safetensors"), os.path.join(tmp, f"y{m}.safetensors")
        build.write_input(x_path, v.name, m, dtype)
        proc = run_metrale(args, ckpt, v.layer, x_path, y_path)
        if proc.returncode != 0:
            print(f"FAIL {case}: metrale exit {proc.returncode}: {proc.stderr.strip()[-600:]}")
            failed.append(case)
            continue
        try:
            y = read_output(y_path, m)
        except (ValueError, KeyError, OSError) as e:
            print(f"FAIL {case}: {e}")
            failed.append(case)
            continue
        want = expected.expected_output(ck, v.layer, build.input_as_bf16(load(x_path)["x"]))
        verdict = expected.compare(y, want)
        status = "PASS" if verdict.passed else "FAIL"
        line = (f"{status} {case}: worst {verdict.worst_ratio:.3g} of budget, max abs err {verdict.max_abs:.3g}, "
                f"{verdict.violations}/{verdict.checked} over, {verdict.excluded} row(s) excluded")
        if not verdict.passed and verdict.worst:
            r, c, got, wanted, bound = verdict.worst
            line += f"; worst at [{r}, {c}]: got {got:.6g}, want {wanted:.6g}, budget {bound:.3g}"
        print(line)
        if not verdict.passed:
            failed.append(case)
        elif m == max(ROWS) and index == 0 and not sensitive(ck, v, y, load(x_path)["x"]):
            print(f"FAIL {case}: the comparison does not notice a down projection group off by 25 %")
            failed.append(case + " (sensitivity)")
    return failed


def sensitive(ck: expected.Checkpoint, v, y: np.ndarray, x: Tensor) -> bool:
    """The budget still catches a wrong loader: with one group of 128 weights of one down
    projection row scaled by 1.25 in the expectation, the output that passed must fail."""
    ffn = models.ffn_layout(ck.config, v.layer, names=ck.tensors.keys())
    down = ffn.dense[2] if ffn.kind == "dense" else ffn.experts[0][2]
    w = ck.weight(down)
    saved = w.copy()
    try:
        if ffn.kind == "moe":  # every expert, so whichever receives rows shows it
            for names in ffn.experts:
                ck.weight(names[2])[7, 0:128] *= 1.25
        else:
            w[7, 0:128] *= 1.25
        return not expected.compare(y, expected.expected_output(ck, v.layer, build.input_as_bf16(x))).passed
    finally:
        w[...] = saved
        if ffn.kind == "moe":
            for names in ffn.experts:
                ck._cache.pop(names[2], None)


def self_test(v) -> list:
    """Writers and decoders agree: every decoded weight is within its quantization step of the
    float weight it came from (half a step, one for a clamped extreme), in every module."""
    with tempfile.TemporaryDirectory() as tmp:
        build.write_checkpoint(tmp, v)
        ck = expected.Checkpoint(tmp)
        asym = not formats.resolved(v.fmt).get("sym", formats.resolved(v.fmt).get("symmetric", True))
        bad = []
        for module, (n, k) in build.linear_modules(ck.config, v).items():
            w = build.random_weight(v.name, module, n, k, asym)
            d = ck.weight(module)
            # One code step of a group is at most 2 max|w| / levels of its row (sym or asym).
            levels = 255 if formats.weight_bits(v.fmt) == 8 else 15
            step = 2 * np.abs(w).max(axis=1) / levels
            if v.fmt["method"] in ("fp8-block", "ct-fp8", "ct-fp8-block"):
                step = np.abs(w).max(axis=1) / 448 * 32 + 2.0 ** -10 * np.abs(w).max(axis=1)
            if v.fmt["method"] == "ct-fp8-static":  # one scale for the whole tensor: its maximum's step
                step = np.full(n, np.abs(w).max() / 448 * 32 + 2.0 ** -10 * np.abs(w).max())
            err = np.abs(d - w).max(axis=1) / step
            # Forced zero points clamp codes on purpose: there only the shape is checked.
            forced = v.fmt.get("force_zero") is not None or v.fmt.get("zero_override")
            if d.shape != w.shape or not (forced or (err <= 1.01).all()):
                bad.append(f"{v.name}: {module}: decoded weight off by {err.max():.3g} steps")
        return bad


def numerics_self_test() -> list:
    """The rounding rules on values whose answers are known by hand."""
    from numerics import bf16_bits, e4m3_codes, e4m3_value, f32_to_bf16_bits, round_bf16
    bad = []
    ties = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -20, -2.5])
    if not np.array_equal(round_bf16(ties), [1.0, 1 + 2.0 ** -6, 1 + 2.0 ** -7, -2.5]):
        bad.append(f"bf16 rounding: {round_bf16(ties)}")
    if not np.array_equal(f32_to_bf16_bits(ties.astype(np.float32)), bf16_bits(ties)):
        bad.append("f32 -> bf16 bits disagree with float64 -> bf16")
    fp8 = e4m3_value(e4m3_codes([500.0, 1.0625, 1.1875, 0.0029, -300.0, 2.0 ** -10]))
    if not np.array_equal(fp8, [448.0, 1.0, 1.25, 2.0 ** -9, -288.0, 0.0]):
        bad.append(f"e4m3 rounding: {fp8}")
    if int(e4m3_codes([448.0])[0]) != 0x7E or not np.isnan(e4m3_value([0x7F, 0xFF])).all():
        bad.append("e4m3: 448 is 0x7e and 0x7f/0xff are NaN")
    return bad


def write_all(args, selected) -> None:
    manifest = []
    for index, v in enumerate(selected):
        base = os.path.join(args.write, v.name)
        ckpt = os.path.join(base, "checkpoint")
        build.write_checkpoint(ckpt, v)
        ck = expected.Checkpoint(ckpt, args.activations)
        entry = {"variant": v.name, "family": v.family, "arch": v.arch, "format": v.fmt, "layer": v.layer,
                 "activations": ck.activations, "config_activations": expected.activation_scheme(ck.qcfg),
                 "notes": v.notes, "checkpoint": ckpt, "cases": []}
        for m, dtype in cases(index):
            x_path = os.path.join(base, f"x_m{m}.safetensors")
            build.write_input(x_path, v.name, m, dtype)
            want = expected.expected_output(ck, v.layer, build.input_as_bf16(load(x_path)["x"]))
            e_path = os.path.join(base, f"expected_m{m}.safetensors")
            save(e_path, {"value": Tensor("F64", want.value), "bound": Tensor("F64", want.bound),
                          "excluded": Tensor("U8", want.excluded.astype(np.uint8))})
            entry["cases"].append({"m": m, "input": x_path, "input_dtype": dtype, "expected": e_path})
        manifest.append(entry)
        print(f"wrote {v.name}")
    with open(os.path.join(args.write, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)


def backend_loaded(args) -> bool:
    probe = subprocess.run([args.metrale, "--json", "list"], capture_output=True, text=True)
    try:
        rows = json.loads(probe.stdout)
    except json.JSONDecodeError:
        return False
    loaded = [r["backend"] for r in rows if r.get("state") == "loaded"]
    return (args.backend in loaded) if args.backend else bool(loaded)


def parse_args():
    families = "\n".join(f"  {name:<15} {text}" for name, text in FAMILIES.items())
    parser = argparse.ArgumentParser(
        description=__doc__.format(families=families, enabled=", ".join(ENABLED)),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metrale", help="the metrale binary")
    parser.add_argument("--backend", help="pass --backend to metrale run")
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES), help="a format family (repeatable)")
    parser.add_argument("--all", action="store_true", help="every family")
    parser.add_argument("--arch", help="comma-separated architectures to keep: " + ",".join(models.ARCHS))
    parser.add_argument("--write", metavar="DIR", help="write checkpoints, inputs and expected outputs under DIR")
    parser.add_argument("--self-test", action="store_true", help="check that writers and decoders agree")
    parser.add_argument("--list", action="store_true", help="list the variants")
    parser.add_argument("--activations", choices=("bf16", "format"), default="bf16",
                        help="bf16: the W*A16 contract (default); format: expect the dynamic activation "
                             "quantization the checkpoint's config asks for (int8/FP8 per token, FP8 per 128)")
    args = parser.parse_args()
    if args.all or not args.family:
        args.family = list(FAMILIES) if (args.all or args.write or args.list or args.self_test) else None
    if not args.family:
        parser.error("name a --family (or --all)")
    if not (args.write or args.list or args.self_test or args.metrale):
        parser.error("--metrale is needed to run the tests")
    return args


def main() -> int:
    args = parse_args()
    archs = set(args.arch.split(",")) if args.arch else None
    selected = [v for f in args.family for v in variants(f) if archs is None or v.arch in archs]
    if args.list:
        for i, v in enumerate(selected):
            print(f"{v.name:<50} layer {v.layer}  {json.dumps(v.fmt)}  cases {cases(i)}  {v.notes}")
        return 0
    if args.self_test:
        bad = numerics_self_test() + [b for v in selected for b in self_test(v)]
        print("\n".join(bad) if bad else f"self-test: {len(selected)} variants, writers and decoders agree")
        return 1 if bad else 0
    if args.write:
        os.makedirs(args.write, exist_ok=True)
        write_all(args, selected)
        return 0
    if not backend_loaded(args):
        print("no usable backend is loaded; skipping", file=sys.stderr)
        return 77
    failed = []
    for index, v in enumerate(selected):
        tmp = tempfile.mkdtemp(prefix="metrale-ckpt-")
        try:
            failed += check_variant(args, v, index, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    total = len(selected) * len(ROWS)
    print(f"{total - len(failed)} passed, {len(failed)} failed")
    if failed:
        print("failed cases:\n  " + "\n  ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
