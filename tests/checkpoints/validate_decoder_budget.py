# SPDX-License-Identifier: MIT OR Apache-2.0
"""Checks the decoder's budget (decoder_expected.py) against transformers itself (needs torch and
transformers, which the test suite does not install; run by hand, as validate_decoder_reference.py):

  python tests/checkpoints/validate_decoder_budget.py [--models qwen3-bf16,...]

For each bf16 model of decoder_models.py (the checkpoints run_decoder_tests.py writes), transformers
in bf16 with eager attention (the rounding points decoder_reference.py copies) and with sdpa
(scores kept in f32, as metrale's kernels keep them) computes the logits of run_decoder_tests.py's
prompts and greedy-decodes its greedy cases; each must pass the same comparison metrale's
output must pass: the logits within the budget of the reference's, every greedy id the
reference's argmax for the same prefix (teacher forcing). One line per model and attention
implementation with the worst logits error as a fraction of the budget; exit 0 when all pass.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder_expected as dx  # noqa: E402
import decoder_models  # noqa: E402
import expected  # noqa: E402
import run_decoder_tests as tests  # noqa: E402


def transformers_outputs(model, g: tests.GenerationCase):
    """ids [B][N], prompt logits [B][L, V] and the logits each id was chosen from [B][N, V]."""
    ids, prompt_logits, chosen_from = [], [], []
    with torch.no_grad():
        for prompt in g.prompts:
            out = model.generate(torch.tensor([prompt]), max_new_tokens=g.new_tokens, min_new_tokens=g.new_tokens,
                                 do_sample=False, output_logits=True, return_dict_in_generate=True)
            ids.append(out.sequences[0, len(prompt):].tolist())
            chosen_from.append(np.stack([step[0].float().numpy() for step in out.logits]).astype(np.float64))
            prompt_logits.append(model(torch.tensor([prompt])).logits[0].float().numpy().astype(np.float64))
    return ids, prompt_logits, chosen_from


def check(m: decoder_models.DecoderModel, attention: str) -> bool:
    with tempfile.TemporaryDirectory() as d:
        decoder_models.write_model(d, m)
        ref = dx.Reference(expected.Checkpoint(d))
        model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation=attention)
        model.generation_config.pad_token_id = 0
        ok, parts = True, []
        for g in tests.generation_cases(m):
            ids, prompt_logits, chosen_from = transformers_outputs(model, g)
            o = tests.judge_generation(ref, g.name, g.prompts, ids, chosen_from, prompt_logits)
            ok &= o.passed
            parts.append(f"{g.name}: {o.text}")
    print(f"{'ok  ' if ok else 'FAIL'} {m.name} {attention}: " + "; ".join(parts), flush=True)
    return ok


def main() -> int:
    bf16 = [m for m in decoder_models.all_models() if m.fmt["method"] == "none"]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(m.name for m in bf16))
    args = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    chosen = [m for m in bf16 if m.name in args.models.split(",")]
    results = [check(m, attention) for m in chosen for attention in ("eager", "sdpa")]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
