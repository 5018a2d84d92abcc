#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Text through one layer of a checkpoint: tokenize with Hugging Face `tokenizers`, turn each token
into a row, run the layer's FFN on the rows with metrale, print what came out (docs/python.md).

metrale has no decoder yet (attention, norms, the embedding and the LM head), so this cannot
generate text: it shows the path a model takes through metrale today, one FFN layer on rows made
from real token ids. Each row is a fixed function of its token id (there is no embedding table to
read), x[t][c] = sin(0.01 (id * hidden + c) + 0.5) in bf16.

Usage: ffn_on_tokens.py CHECKPOINT_DIR LAYER "some text"
The tokenizer is CHECKPOINT_DIR/tokenizer.json when there is one; otherwise a small byte-level BPE
is trained on the text itself (no download)."""
import os
import sys

import ml_dtypes
import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import metrale


def tokenizer_for(checkpoint: str, text: str) -> Tokenizer:
    path = os.path.join(checkpoint, "tokenizer.json")
    if os.path.exists(path):
        return Tokenizer.from_file(path)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator([text], trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tokenizer


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    checkpoint, layer, text = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    encoding = tokenizer_for(checkpoint, text).encode(text)
    print("tokens:", " ".join(f"{token}({i})" for token, i in zip(encoding.tokens, encoding.ids)))

    backend = metrale.Runtime().select()
    ffn = metrale.Ffn(backend, checkpoint, layer=layer)
    hidden = ffn.hidden_size
    ids = np.array(encoding.ids, dtype=np.float64)[:, None]
    x = np.sin(0.01 * (ids * hidden + np.arange(hidden)) + 0.5).astype(ml_dtypes.bfloat16)
    y = ffn.forward(x)

    print(f"backend {backend.name} ({backend.target}), layer {ffn.info['layer']} of {checkpoint}: {ffn.info['declared']}")
    for token, row in zip(encoding.tokens, y.astype(np.float32)):
        print(f"  {token!r:>12}  |y| {np.linalg.norm(row):8.4f}  y[:4] {np.array2string(row[:4], precision=4)}")
    print(f"{len(ffn.audit())} kernel lookups; plan for {len(encoding.ids)} rows: "
          + ", ".join(step["kernel"] for step in ffn.plan(len(encoding.ids))))
    print("generation needs the decoder (attention, norms, embedding, LM head), which metrale does not have yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
