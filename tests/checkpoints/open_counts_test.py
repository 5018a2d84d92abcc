#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""`metrale run --weights DIR` reads each file of a checkpoint once: config.json, the index and
every shard are opened exactly once (the composition reads them once and hands the parts on).
The opens are counted by the LD_PRELOAD shim tests/support/count_opens.c, which logs the path of
every open/openat/fopen of the process.

Usage: open_counts_test.py METRALE SHIM. Exit 0 pass, 1 fail, 77 when the CPU backend is absent."""
import collections
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import build  # noqa: E402
from variants import variants  # noqa: E402


def main() -> int:
    metrale, shim = sys.argv[1], sys.argv[2]
    # A sharded GPTQ checkpoint, written as the tool writes it (two shards and an index).
    v = next(v for v in variants("gptq") if v.shards > 1)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(tmp, "ckpt")
        build.write_checkpoint(ckpt, v)
        x = os.path.join(tmp, "x.safetensors")
        build.write_input(x, v.name, 5, "BF16")
        log = os.path.join(tmp, "opens.log")
        env = dict(os.environ, LD_PRELOAD=shim, METRALE_TEST_OPEN_LOG=log)
        # Under AddressSanitizer the shim precedes the ASan runtime in the preload list.
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
        cmd = [metrale, "run", "--weights", ckpt, "--layer", str(v.layer), "--input", x,
               "--output", os.path.join(tmp, "y.safetensors"), "--quiet", "--repeat", "1", "--warmup", "0"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        if proc.returncode != 0:
            print(f"FAIL: {' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
            return 1
        with open(log) as f:
            opened = collections.Counter(os.path.realpath(line.rstrip("\n")) for line in f if line.strip())
        files = sorted(os.path.join(ckpt, n) for n in os.listdir(ckpt) if n == "config.json" or ".safetensors" in n)
        shards = [f for f in files if f.endswith(".safetensors")]
        if len(shards) < 2:
            print(f"FAIL: expected a sharded checkpoint, found {files}")
            return 1
        failures = []
        for f in files:
            count = opened[os.path.realpath(f)]
            print(f"{os.path.basename(f)}: opened {count} time(s)")
            if count != 1:
                failures.append(f"{os.path.basename(f)} opened {count} times, expected once")
        if sum(opened.values()) == 0:
            failures.append("the shim logged no open at all: it did not run")
        for line in failures:
            print(f"FAIL: {line}")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
