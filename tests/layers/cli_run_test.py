#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""`metrale run` end to end on the CPU backend: presets pass --check, the audit and plan are in
the JSON, weights saved with --save-weights load back to the same output, a config.json path
works, --weights finds the config.json beside it (and says so when there is none), --input /
--output carry activations through safetensors files (F32/F16 rounded to bf16), the per-expert
MoE path shows in the audit, and bad input fails with a clear message (with --json, also as one
JSON object {"error", "status", "exit"} on stdout; refusals exit 3, errors 1, usage 2).
Usage: cli_run_test.py <path to metrale>. Exit 77 when the CPU backend is not loaded."""
import json
import os
import shutil
import struct
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


def write_safetensors(path, name, dtype, shape, payload):
    """One tensor, written the way the format is defined (8-byte length, JSON header, bytes)."""
    header = json.dumps({name: {"dtype": dtype, "shape": shape, "data_offsets": [0, len(payload)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + payload)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def bf16_of_f32(v):
    """Round to nearest, ties to even (the rule `metrale run --input` applies)."""
    u = f32_bits(v)
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16


def fnv1a64(payload):
    h = 0xCBF29CE484222325
    for b in payload:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


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

# --input / --output: rows from a file (m from the tensor), the output written as BF16 'y'.
with tempfile.TemporaryDirectory() as tmp:
    H, m = 256, 5
    values = [((i * 37) % 101 - 50) / 64.0 + (i % 3) * 2.0 ** -9 for i in range(m * H)]
    x32 = os.path.join(tmp, "x32.safetensors")
    write_safetensors(x32, "x", "F32", [m, H], struct.pack(f"<{m * H}f", *values))
    xbf = os.path.join(tmp, "xbf.safetensors")
    write_safetensors(xbf, "x", "BF16", [m, H], struct.pack(f"<{m * H}H", *[bf16_of_f32(v) for v in values]))
    y = os.path.join(tmp, "y.safetensors")
    out = run_json("--input", x32, "--output", y, "--check", "--repeat", "1")
    check(out.get("tokens") == m, f"--input: m is not taken from the tensor: {out.get('tokens')}")
    check(out.get("check", {}).get("passed") is True, f"--input: check did not pass: {out.get('check')}")
    check("rounded to bf16" in out.get("input", ""), f"--input F32: source not reported: {out.get('input')}")
    tensors = read_safetensors(y) if os.path.exists(y) else {}
    dtype, shape, payload = tensors.get("y", (None, None, b""))
    check(dtype == "BF16" and shape == [m, H], f"--output: tensor 'y' is {dtype} {shape}, expected BF16 [{m}, {H}]")
    check(fnv1a64(payload) == out.get("output_fnv1a64"), "--output: the file's bytes are not the reported output")
    # F32 rounded to bf16 on the way in gives the same output as the bf16 values themselves.
    same = run_json("--input", xbf, "--repeat", "1")
    check(same.get("output_fnv1a64") == out.get("output_fnv1a64"), "F32 input does not run as its bf16 rounding")
    run("--input", x32, "--tokens", str(m), "--repeat", "1")  # agreeing --tokens is fine
    proc = run("--input", x32, "--tokens", "3", expect_rc=1)
    check("--tokens 3 conflicts with --input" in proc.stderr and f"has {m} rows" in proc.stderr,
          f"--tokens conflict: unclear message: {proc.stderr[-500:]}")
    narrow = os.path.join(tmp, "narrow.safetensors")
    write_safetensors(narrow, "x", "F32", [2, 128], bytes(2 * 128 * 4))
    proc = run("--input", narrow, expect_rc=1)
    check("narrow.safetensors: tensor 'x': shape [2, 128], expected [m, 256]" in proc.stderr,
          f"--input shape: unclear message: {proc.stderr[-500:]}")
    ints = os.path.join(tmp, "ints.safetensors")
    write_safetensors(ints, "x", "I32", [1, H], bytes(H * 4))
    proc = run("--input", ints, expect_rc=1)
    check("tensor 'x': dtype I32, expected BF16, F16 or F32" in proc.stderr, f"--input dtype: unclear message: {proc.stderr[-500:]}")
    wrong_name = os.path.join(tmp, "named.safetensors")
    write_safetensors(wrong_name, "hidden", "F32", [1, H], bytes(H * 4))
    proc = run("--input", wrong_name, expect_rc=1)
    check("named.safetensors" in proc.stderr and "'x'" in proc.stderr, f"--input without 'x': unclear message: {proc.stderr[-500:]}")

# --weights without --model: the config.json beside the weights, never a preset in its place.
with tempfile.TemporaryDirectory() as tmp:
    ckpt = os.path.join(tmp, "ckpt")
    os.mkdir(ckpt)
    weights = os.path.join(ckpt, "ffn.safetensors")
    cfg = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 384, "hidden_act": "silu"}
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f)
    first = run_json("--model", os.path.join(tmp, "config.json"), "--save-weights", weights, "--tokens", "2")
    proc = run("--weights", ckpt, expect_rc=1)
    check(f"{ckpt}: no model config: expected {os.path.join(ckpt, 'config.json')}" in proc.stderr,
          f"--weights without config.json: unclear message: {proc.stderr[-500:]}")
    proc = run("--weights", weights, expect_rc=1)
    check("no model config" in proc.stderr, f"--weights FILE without config.json: unclear message: {proc.stderr[-500:]}")
    shutil.copy(os.path.join(tmp, "config.json"), ckpt)
    index = os.path.join(ckpt, "model.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"weight_map": {name: "ffn.safetensors" for name in read_safetensors(weights)}}, f)
    for source in (ckpt, weights, index):
        out = run_json("--weights", source, "--tokens", "2", "--check")
        check(out.get("model", {}).get("intermediate_size") == 384, f"--weights {source}: its config.json was not used")
        check(out.get("output_fnv1a64") == first.get("output_fnv1a64"), f"--weights {source}: output differs")

# Per-expert MoE launches: no grouped lookup in the audit, the dense chain instead, still correct.
out = run_json("--model", "small-moe", "--per-expert", "--check", "--tokens", "9")
kernels = [r["kernel"] for r in out.get("audit", [])]
check("w4a16_grouped_gemm" not in kernels, f"--per-expert still looked up the grouped kernel: {kernels}")
check(out.get("check", {}).get("passed") is True, "per-expert MoE fails the check")

# Bad input.
proc = run("--model", "no-such-model", expect_rc=1)
check("neither a preset" in proc.stderr, f"unknown model: unclear message: {proc.stderr[-500:]}")
run("--model", "small-dense", "--tokens", "0", expect_rc=1)


def json_failure(args, code, status, needle, program_flag=False):
    """With --json (the program's or run's own), a failure is also one JSON object on stdout."""
    cmd = [METRALE, "--json", "run", "--quiet", *args] if program_flag else [METRALE, "run", "--quiet", "--json", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        failures.append(f"{' '.join(cmd)}: stdout is not one JSON object: {proc.stdout[:300]!r}")
        return
    check(proc.returncode == code and doc.get("exit") == code and doc.get("status") == status and
          needle in doc.get("error", ""), f"{' '.join(cmd)}: exit {proc.returncode}, JSON {doc}; expected exit {code}, "
                                          f"status {status}, an error naming {needle!r}")


json_failure(["--model", "no-such-model"], 1, "not-found", "neither a preset")
json_failure(["--model", "small-dense", "--tokens", "0"], 1, "invalid-argument", "--tokens must be at least 1", program_flag=True)
json_failure(["--no-such-flag"], 2, "usage", "--no-such-flag")
with tempfile.TemporaryDirectory() as tmp:
    cfg = os.path.join(tmp, "config.json")
    with open(cfg, "w") as f:
        json.dump({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "hidden_act": "relu2"}, f)
    json_failure(["--model", cfg], 3, "incompatible", "hidden_act = \"relu2\" is not supported")
    json_failure(["--model", cfg], 3, "incompatible", "hidden_act = \"relu2\" is not supported", program_flag=True)
    with open(cfg, "w") as f:
        f.write('{"hidden_size": 256, "num_experts": [8]}')
    json_failure(["--model", cfg], 1, "invalid-argument", "num_experts: expected a non-negative integer below 2^32, found an array")
# A refusal at start-up, before the command line is parsed (a lever naming no backend).
proc = subprocess.run([METRALE, "--json", "list"], capture_output=True, text=True, env=dict(os.environ, METRALE_BACKEND="nosuch"))
try:
    doc = json.loads(proc.stdout)
except json.JSONDecodeError:
    doc = {}
check(proc.returncode == 3 and doc.get("exit") == 3 and "nosuch" in doc.get("error", ""),
      f"METRALE_BACKEND=nosuch metrale --json list: exit {proc.returncode}, stdout {proc.stdout[:300]!r}")
# Without --json nothing reaches stdout.
proc = run("--model", "no-such-model", expect_rc=1)
check(proc.stdout == "", f"an error without --json wrote to stdout: {proc.stdout[:300]!r}")

if failures:
    print("\n".join(failures), file=sys.stderr)
    sys.exit(1)
print("metrale run: all checks passed")
