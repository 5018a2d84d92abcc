#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""`metrale run` end to end on the CPU backend: presets pass --check, the audit and plan are in
the JSON, weights saved with --save-weights load back to the same output, a config.json path
works, the per-expert MoE path shows in the audit, and bad input fails with a clear message.
Usage: cli_run_test.py <path to metrale>. Exit 77 when the CPU backend is not loaded."""
import json
import os
import subprocess
import sys
import tempfile

METRALE = sys.argv[1]
failures = []


def run(*args, expect_rc=0):
    proc = subprocess.run([METRALE, "run", "--quiet", *args], capture_output=True, text=True)
    if proc.returncode != expect_rc:
        failures.append(f"run {' '.join(args)}: exit {proc.returncode}, expected {expect_rc}\n{proc.stderr[-2000:]}")
    return proc


def run_json(*args):
    proc = run(*args, "--json")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        failures.append(f"run {' '.join(args)} --json: stdout is not JSON: {proc.stdout[:300]!r}")
        return {}


def check(cond, what):
    if not cond:
        failures.append(what)


probe = subprocess.run([METRALE, "--json", "list"], capture_output=True, text=True)
try:
    loaded = [e["backend"] for e in json.loads(probe.stdout) if e.get("state") == "loaded"]
except (json.JSONDecodeError, TypeError, KeyError):
    loaded = []
if "cpu" not in loaded:
    print("the cpu backend is not loaded; skipping", file=sys.stderr)
    sys.exit(77)

# Small presets at a tile-GEMM row count: check passes, the audit and the plan are reported.
for preset in ["small-dense", "small-dense-gelu", "small-moe"]:
    out = run_json("--model", preset, "--backend", "cpu", "--check", "--tokens", "9", "--repeat", "2")
    check(out.get("check", {}).get("passed") is True, f"{preset}: check did not pass: {out.get('check')}")
    check(len(out.get("audit", [])) > 0, f"{preset}: no audit rows")
    check(any(s["kernel"].startswith("act/") for s in out.get("plan", [])), f"{preset}: no act step in the plan")
    check(out.get("timing", {}).get("median_s", 0) > 0, f"{preset}: no timing")

# The fallbacks show in the audit: no _p3 on the CPU, and no m128 v2 lookup without the lever.
out = run_json("--model", "small-dense", "--backend", "cpu")
rows = {r["kernel"]: r["outcome"] for r in out.get("audit", [])}
check(rows.get("w4a16_gemm_t_p3") == "null", f"expected a null w4a16_gemm_t_p3 row: {rows}")
check(rows.get("w4a16_gemm_t") == "resolved", f"expected w4a16_gemm_t resolved: {rows}")
check("w4a16_gemm_t_m128_v2" not in rows, f"unexpected m128 v2 lookup: {rows}")

# Weights written by --save-weights load back and give the same output.
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "moe.safetensors")
    first = run_json("--model", "small-moe", "--seed", "7", "--save-weights", path, "--tokens", "5")
    check(os.path.getsize(path) > 0, "--save-weights wrote nothing")
    second = run_json("--model", "small-moe", "--seed", "7", "--weights", path, "--tokens", "5", "--check")
    check(first.get("output_fnv1a64") == second.get("output_fnv1a64") is not None,
          f"output differs after a save/load round trip: {first.get('output_fnv1a64')} vs {second.get('output_fnv1a64')}")
    check(second.get("check", {}).get("passed") is True, "reloaded weights fail the check")

    # A truncated file is an error that names the problem.
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    proc = run("--model", "small-moe", "--weights", path, expect_rc=1)
    check("truncated" in proc.stderr, f"truncated weights: unclear message: {proc.stderr[-500:]}")

    # A config.json path.
    cfg = os.path.join(tmp, "config.json")
    with open(cfg, "w") as f:
        json.dump({"model_type": "llama", "hidden_size": 384, "intermediate_size": 1152, "hidden_act": "silu"}, f)
    out = run_json("--model", cfg, "--check", "--tokens", "3")
    check(out.get("model", {}).get("intermediate_size") == 1152, "config.json not used")
    check(out.get("check", {}).get("passed") is True, "config.json model fails the check")

# Per-expert MoE launches: no grouped lookup in the audit, the dense chain instead, still correct.
out = run_json("--model", "small-moe", "--per-expert", "--check", "--tokens", "9")
kernels = [r["kernel"] for r in out.get("audit", [])]
check("w4a16_grouped_gemm" not in kernels, f"--per-expert still looked up the grouped kernel: {kernels}")
check(out.get("check", {}).get("passed") is True, "per-expert MoE fails the check")

# Bad input.
proc = run("--model", "no-such-model", expect_rc=1)
check("neither a preset" in proc.stderr, f"unknown model: unclear message: {proc.stderr[-500:]}")
run("--model", "small-dense", "--tokens", "0", expect_rc=1)

if failures:
    print("\n".join(failures), file=sys.stderr)
    sys.exit(1)
print("metrale run: all checks passed")
