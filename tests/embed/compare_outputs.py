#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Exit 0 when tensor "y" of every file equals (bit for bit, shape and dtype) tensor "y" of the
first; else print the first difference and exit 1. Usage: compare_outputs.py Y.safetensors Y2 ..."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkpoints"))

import numpy as np  # noqa: E402

from safetensors_np import load  # noqa: E402


def main() -> int:
    want = load(sys.argv[1])["y"]
    for path in sys.argv[2:]:
        got = load(path)["y"]
        if got.dtype != want.dtype or got.data.shape != want.data.shape:
            print(f"{path}: y is {got.dtype} {list(got.data.shape)}, {sys.argv[1]}: {want.dtype} {list(want.data.shape)}")
            return 1
        diff = np.argwhere(got.data != want.data)
        if len(diff):
            i = tuple(diff[0])
            print(f"{path}: y differs from {sys.argv[1]} in {len(diff)} values, first at {list(i)}: "
                  f"{got.data[i]:#06x} != {want.data[i]:#06x}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
