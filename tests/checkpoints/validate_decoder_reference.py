# SPDX-License-Identifier: MIT OR Apache-2.0
"""Checks decoder_reference.py against transformers itself (needs torch and transformers, which
the test suite does not install; run by hand, see docs/testing.md):

  python tests/checkpoints/validate_decoder_reference.py [--tokens 32]

For tiny random dense Llama (llama3 RoPE), Qwen2 (q/k/v bias, tied embeddings) and Qwen3 (q/k norm;
default and yarn RoPE) models saved by save_pretrained in bf16 (the MoE models' transformers-5
files fuse the experts into unquantized gate_up_proj / down_proj tensors, which expected.py does not
split yet):
- exact math: transformers in float64 with eager attention against the reference with rounded=False and a float64 FFN:
  the logits of a 12-token prompt agree to 1e-5 of their largest magnitude (transformers computes
  RMSNorm and RoPE in f32 in a float64 model too: about 2e-7 remains);
- bf16: transformers in bf16 (eager) against the reference with rounded=True and expected.py's
  FFN: the largest logit difference relative to the logits' RMS, beside the same figure for
  transformers' bf16 run against its own exact one (bf16 alone moves the logits that much), and
  greedy decoding of --tokens tokens, each transformers token checked against the reference's
  logits of the same prefix: within 0.05 RMS of their maximum.
Exit 0 when every model passes; one line per model.
"""
import argparse
import os
import sys
import tempfile
import zlib

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder_reference  # noqa: E402
import expected  # noqa: E402
import models  # noqa: E402
from numerics import bf16_bits  # noqa: E402

COMMON = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=32, vocab_size=320, max_position_embeddings=4096,
              rms_norm_eps=1e-6, tie_word_embeddings=False)

MODELS = {
    "llama-llama3-rope": (transformers.LlamaConfig, dict(
        rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "qwen2-bias-tied": (transformers.Qwen2Config, dict(rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen3": (transformers.Qwen3Config, dict(rope_theta=1000000.0)),
    # Qwen3's model card: factor 4 over 32768 while max_position_embeddings is 40960 (transformers 5
    # takes the factor, not the ratio of the two).
    "qwen3-yarn": (transformers.Qwen3Config, dict(
        rope_theta=1000000.0, max_position_embeddings=40960,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})),
}


def exact_ffn(ck: expected.Checkpoint):
    """The FFN in float64 without any rounding (dense or MoE, softmax top-k routing)."""
    def dense(names, x):
        g, u, d = (ck.weight(n) for n in names)
        gx = x @ g.T
        return (gx / (1 + np.exp(-gx)) * (x @ u.T)) @ d.T

    def run(layer, x):
        f = models.ffn_layout(ck.config, layer, names=ck.tensors.keys())
        if f.kind == "dense":
            return dense(f.dense, x)
        logits = x @ ck.weight(f.router).T
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        ids = np.argsort(-p, axis=1, kind="stable")[:, :f.top_k]
        w = np.take_along_axis(p, ids, axis=1)
        if f.renormalize:
            w /= w.sum(axis=1, keepdims=True)
        out = np.zeros_like(x)
        for r in range(x.shape[0]):
            for j in range(f.top_k):
                out[r] += w[r, j] * dense(f.experts[ids[r, j]], x[r:r + 1])[0]
        return out
    return run


def contract_ffn(ck: expected.Checkpoint):
    return lambda layer, x: expected.expected_output(ck, layer, bf16_bits(x)).value


def check(name: str, cls, extra, tokens: int) -> bool:
    torch.manual_seed(zlib.crc32(name.encode()))  # str hashes differ per process
    config = cls(**dict(COMMON, **extra), attn_implementation="eager")
    model = transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():  # wider than the default init so the layers matter
            p.copy_(torch.randn_like(p) * (0.08 if p.dim() > 1 else 0.3) + (1.0 if p.dim() == 1 else 0.0))
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        ck = expected.Checkpoint(d)
        tensor = lambda n: expected.decoders.float_values(ck.tensor(n))  # noqa: E731
        prompt = list(np.random.default_rng(1).integers(0, COMMON["vocab_size"], 12))
        ids = torch.tensor([prompt])
        exact = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager")
        with torch.no_grad():
            want = exact(ids).logits[0].double().numpy()
        ref = decoder_reference.DecoderReference(ck.config, ck.weight, exact_ffn(ck), rounded=False, tensor=tensor)
        got = ref.forward(prompt)
        exact_rel = float(np.abs(got - want).max() / np.abs(want).max())
        with torch.no_grad():
            bf = model(ids).logits[0].float().numpy()
        rounded = decoder_reference.DecoderReference(ck.config, ck.weight, contract_ffn(ck), rounded=True, tensor=tensor)
        rl = rounded.forward(prompt)
        rms = float(np.sqrt(np.mean(bf * bf)))
        bf16_rel = float(np.abs(rl - bf).max() / rms)
        bf16_own = float(np.abs(want - bf).max() / rms)
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=tokens, do_sample=False, min_new_tokens=tokens)[0, len(prompt):].tolist()
        # Teacher-forced: each transformers token against the reference logits of the same prefix.
        worst_margin, same = 0.0, 0
        seq = list(prompt)
        for t in out:
            last = rounded.forward(seq)[-1]
            worst_margin = max(worst_margin, float(last.max() - last[t]) / float(np.sqrt(np.mean(last * last))))
            same += int(np.argmax(last) == t)
            seq.append(t)
    ok = exact_rel < 1e-5 and bf16_rel < 2 * bf16_own + 0.01 and worst_margin < 0.05
    print(f"{'ok  ' if ok else 'FAIL'} {name:18s} exact: max diff / max {exact_rel:.1e}; bf16: max diff / rms "
          f"{bf16_rel:.4f} (transformers bf16 vs its exact run: {bf16_own:.4f}); greedy {tokens}: {same} same argmax, "
          f"worst margin / rms {worst_margin:.4f}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    results = [check(n, *MODELS[n], args.tokens) for n in args.models.split(",")]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
