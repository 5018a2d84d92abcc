#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Writes the small checkpoints the embedding test runs, as tests/checkpoints writes them (GPTQ v1
as AutoGPTQ writes it): OUT/dense (Qwen3, the FFN of layer 1 dense) and OUT/moe (Qwen3-MoE, layer 0).
Usage: write_checkpoints.py OUT"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkpoints"))

from build import Variant, write_checkpoint  # noqa: E402

GPTQ = dict(method="gptq", writer="autogptq")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    write_checkpoint(os.path.join(out, "dense"), Variant(name="embed/dense", family="gptq", arch="qwen3", fmt=GPTQ, layer=1))
    write_checkpoint(os.path.join(out, "moe"), Variant(name="embed/moe", family="gptq", arch="qwen3_moe", fmt=GPTQ, layer=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
