#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""METRALE_LOCK binds `metrale run` as it binds `metrale audit`: a lock written by
`metrale audit --model M --lock FILE` lets `metrale run --model M` start, and refuses it (exit 3,
naming the site and both values) when a selector lever, the weight tier, the activation tier or
the backend differs from the lock (a lever that changes no lookup, like METRALE_W4A16_K64_MIN_K, through
the pinned annotation the k64 site carries).

Usage: lock_run_test.py METRALE. Exit 0 pass, 1 fail, 77 when the CPU backend is absent."""
import json
import os
import subprocess
import sys
import tempfile

METRALE = sys.argv[1]
failures = []


def metrale(*args, env=None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("METRALE_") or k == "METRALE_LOG"}
    clean.update(env or {})
    return subprocess.run([METRALE, *args], capture_output=True, text=True, env=clean, timeout=300)


def expect(proc, code, *parts, what):
    if proc.returncode != code:
        failures.append(f"{what}: exit {proc.returncode}, expected {code}\n{proc.stderr[-1500:]}")
        return
    for part in parts:
        if part not in proc.stderr:
            failures.append(f"{what}: stderr lacks {part!r}\n{proc.stderr[-1500:]}")


def main() -> int:
    if "cpu" not in metrale("list").stdout:
        print("SKIP: the CPU backend is not loaded")
        return 77
    run = ["run", "--model", "small-dense", "--tokens", "64", "--quiet", "--repeat", "1", "--warmup", "0"]
    with tempfile.TemporaryDirectory() as tmp:
        lock = os.path.join(tmp, "lock.json")
        made = metrale("audit", "--model", "small-dense", "--lock", lock)
        expect(made, 0, what="audit --lock")
        expect(metrale(*run, env={"METRALE_LOCK": lock}), 0, what="run under its own lock")
        # The activation tier (a flag) and the weight tier: the tier of each site is pinned.
        expect(metrale(*run, "--activation-quantization", "int8", env={"METRALE_LOCK": lock}), 3,
               "METRALE_LOCK=" + lock, "layers/ffn/dense_ffn.cpp:", "bf16/w4a16", "int8/w4a8",
               what="run with another activation tier")
        expect(metrale(*run, "--weight-quantization", "int8", env={"METRALE_LOCK": lock}), 3,
               "layers/ffn/dense_ffn.cpp:", "bf16/w4a16", "bf16/w8a16", what="run with another weight tier")
        # The deep-K threshold: on small-dense it changes which kernels the site looks up ...
        expect(metrale(*run, env={"METRALE_LOCK": lock, "METRALE_W4A16_K64_MIN_K": "64"}), 3,
               "w4a16/w4a16_gemm_t_k64: in the current configuration only", what="run with METRALE_W4A16_K64_MIN_K=64")
        # ... on qwen3-32b (K 5120 and 25600) both thresholds look up the same kernels and only
        # the K from which the site launches k64 differs: the site's pinned annotation says so.
        big = os.path.join(tmp, "big.json")
        expect(metrale("audit", "--model", "qwen3-32b", "--lock", big), 0, what="audit --model qwen3-32b --lock")
        expect(metrale("audit", "--model", "qwen3-32b", env={"METRALE_LOCK": big, "METRALE_W4A16_K64_MIN_K": "4096"}), 3,
               "annotation w4a16_k64_min_k 6144 in the lock, 4096 in the current configuration",
               what="audit --model qwen3-32b with METRALE_W4A16_K64_MIN_K=4096")
        expect(metrale("audit", "--model", "qwen3-32b", env={"METRALE_LOCK": big}), 0, what="audit under its own lock")
        # A selector lever that changes a lookup.
        expect(metrale(*run, env={"METRALE_LOCK": lock, "METRALE_NO_TGEMM_PIPELINE3": "1"}), 3,
               "w4a16/w4a16_gemm_t_p3: in the lock only", what="run with METRALE_NO_TGEMM_PIPELINE3")
        # A lock taken on another backend: every row names both.
        with open(lock) as f:
            doc = json.load(f)
        for row in doc["rows"]:
            row["backend"] = "elsewhere"
        other = os.path.join(tmp, "other.json")
        with open(other, "w") as f:
            json.dump(doc, f)
        expect(metrale(*run, env={"METRALE_LOCK": other}), 3, 'backend "elsewhere" -> "cpu"',
               what="run under a lock of another backend")
    for line in failures:
        print(f"FAIL: {line}")
    print(f"{'FAIL' if failures else 'ok'}: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
