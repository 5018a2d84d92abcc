#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Loading a model once: peak resident memory of `metrale generate` against the checkpoint's size.

A benchmark, not a test (CI does not run it): writes a random Qwen3-1.7B-shaped bf16 checkpoint
with transformers' own Qwen3Config and save_pretrained (tied embedding, as the real model; about
3.4 GB, once, into --dir), runs `metrale generate` on it on the CPU backend and prints the peak
resident memory beside the checkpoint's bytes, with the bytes read, mapped and uploaded that
`generate --json` reports (docs/perf.md, "Loading").

Usage: bench_load_memory.py --metrale build/cli/metrale --dir /tmp/qwen3-1.7b-bf16
       [--python .venv-transformers/bin/python to write the checkpoint]
"""
import argparse
import json
import os
import platform
import subprocess
import sys

WRITE = r'''
import sys, torch, transformers
config = transformers.Qwen3Config(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                                  max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                                  tie_word_embeddings=True, torch_dtype="bfloat16")
torch.manual_seed(0)
with torch.device("cpu"):
    model = transformers.Qwen3ForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(sys.argv[1])
'''


def checkpoint_bytes(directory):
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory) if f.endswith(".safetensors"))


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metrale", required=True)
    ap.add_argument("--dir", required=True, help="where the checkpoint is (written when missing)")
    ap.add_argument("--python", default=sys.executable, help="a Python with torch and transformers, to write it")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.dir, "config.json")):
        print(f"writing a random Qwen3-1.7B-shaped bf16 checkpoint into {a.dir} ...", file=sys.stderr)
        subprocess.run([a.python, "-c", WRITE, a.dir], check=True)
    size = checkpoint_bytes(a.dir)
    proc = subprocess.run([a.metrale, "generate", "--weights", a.dir, "--prompt-ids", "1,2,3,4,5,6,7,8",
                           "--max-new-tokens", "4", "--backend", "cpu", "--json", "--quiet"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return 1
    doc = json.loads(proc.stdout)
    mem = doc.get("memory", {})
    peak = mem.get("peak_resident_bytes", 0)
    gib = 1 << 30
    print(f"CPU              {cpu_name()}")
    print(f"checkpoint       {size / gib:.2f} GiB ({size} bytes) in {a.dir}")
    print(f"peak resident    {peak / gib:.2f} GiB = {peak / size:.2f} x the checkpoint (goal <= 1.15)")
    for key in ("bytes_read", "bytes_mapped", "bytes_uploaded", "device_weight_bytes"):
        if key in mem:
            print(f"{key:<16} {mem[key] / gib:.2f} GiB = {mem[key] / size:.2f} x")
    print(f"generated        {doc['sequences'][0]['generated']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
