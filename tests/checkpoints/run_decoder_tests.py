#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Whole-decoder tests: small whole-model checkpoints (decoder_models.py: Qwen3, Qwen3-MoE, Qwen2
with q/k/v bias and tied embeddings, Llama with llama3 RoPE; each in bf16 and in one quantized
format) run through

  metrale run --weights DIR --layer N --block decoder|attention --input x.safetensors --output y.safetensors
  metrale generate --weights DIR (--prompt-ids ... | --batch-file ids.safetensors) --max-new-tokens N
                   [--prompt-logits] --output out.safetensors --json

and compared with decoder_expected.py's reference (float64, transformers' bf16 rounding points,
expected.py's FFN) within its budget (docs/layers.md, "The decoder's budget"). Cases per model:
  block prefill-1, prefill-7 (positions from 1000, F32 input), prefill-64: --block decoder, one
        sequence, one step;
  block decode: --block decoder, three sequences prefilled in steps of 5, 9 and 2 rows, then three
        batched decode steps of one row each (sequence / step / positions tensors); the same rows
        through --block attention;
  logits: the prompt logits of a 12-token prompt (--prompt-logits --max-new-tokens 1), and again
        in chunks of 5 (--prefill-chunk 5) when the binary has that option;
  greedy: 32 tokens after a 6-token prompt, and after a batch of 3 prompts (4, 11, 7 tokens;
        --batch-file with lengths; --block-size 4): each id must be the reference's argmax for the
        same prefix (teacher forcing), each step's logits within budget; a step whose reference top-2 margin
        lies within the budget is reported as a near-tie, not failed.
One line per case; exit 1 naming every failed case; 77 when the CPU backend is not loaded.

  run_decoder_tests.py --metrale PATH [--model NAME ...] [--keep DIR]
  run_decoder_tests.py --self-test [--model NAME ...]   the budget accepts an f32 implementation
                       (F32Implementation) and rejects every perturbation (no metrale)
  run_decoder_tests.py --list
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np  # noqa: E402
except ImportError:
    print(f"{sys.executable}: numpy is missing (Debian: python3-numpy, which .ci/setup installs)", file=sys.stderr)
    sys.exit(1)

import build  # noqa: E402
import decoder_expected as dx  # noqa: E402
import decoder_models  # noqa: E402
import expected  # noqa: E402
from numerics import bf16_bits, bf16_value  # noqa: E402
from safetensors_np import Tensor, load, save, tensor  # noqa: E402

NEW_TOKENS = 32
LOGITS_PROMPT = 12
GREEDY_PROMPT = 6
BATCH_PROMPTS = (4, 11, 7)
BATCH_BLOCK_SIZE = 4  # KV blocks of 4 tokens: each sequence spans several, interleaved with the others'
PREFILL_CHUNK = 5
DECODE_PROMPTS = (5, 9, 2)
DECODE_STEPS = 3
PERTURBED_TOKENS = 8  # a perturbation shows within a few steps; the self-test's greedy runs stop there


@dataclass
class BlockCase:
    name: str
    kind: str  # "decoder" or "attention"
    layer: int
    x: np.ndarray          # [m, H] bf16 values
    x_dtype: str           # as stored: BF16 or F32 (bf16 values either way)
    extra: Dict[str, Tensor]  # positions / sequence / step as written (absent: the CLI's defaults)
    positions: np.ndarray
    sequence: np.ndarray
    step: np.ndarray


def hidden_states(ref: dx.Reference, layer: int, ids: np.ndarray) -> np.ndarray:
    """What layer `layer` sees for a prompt of ids (one sequence from position 0)."""
    h = ref.embed(ids)
    for below in range(layer):
        h, _ = ref.layer(below, h, np.arange(len(ids)))
    return h


def block_cases(model: decoder_models.DecoderModel, ref: dx.Reference) -> List[BlockCase]:
    rng = lambda what: build.rng_for(model.name, what)  # noqa: E731
    vocab = model.vocab
    out = []
    for i, (name, m, first) in enumerate((("prefill-1", 1, 0), ("prefill-7", 7, 1000), ("prefill-64", 64, 0))):
        layer = i % 2
        x = hidden_states(ref, layer, rng(name).integers(0, vocab, m))
        positions = np.arange(first, first + m)
        extra = {"positions": tensor("I64", positions)} if first else {}
        out.append(BlockCase(name, "decoder", layer, x, "F32" if first else "BF16", extra, positions,
                             np.zeros(m, dtype=np.int64), np.zeros(m, dtype=np.int64)))
    # Three sequences: prompts in steps of their own, then batched decode steps of one row each.
    sequence, step, positions = [], [], []
    for s, n in enumerate(DECODE_PROMPTS):
        sequence += [s] * n
        step += [s] * n
        positions += list(range(n))
    for j in range(DECODE_STEPS):
        for s, n in enumerate(DECODE_PROMPTS):
            sequence.append(s)
            step.append(len(DECODE_PROMPTS) + j)
            positions.append(n + j)
    sequence, step, positions = (np.array(a, dtype=np.int64) for a in (sequence, step, positions))
    extra = {"positions": tensor("I32", positions), "sequence": tensor("I32", sequence), "step": tensor("I64", step)}
    for kind, layer in (("decoder", 1), ("attention", 0)):
        x = np.zeros((len(sequence), decoder_models.HIDDEN))
        for s in range(len(DECODE_PROMPTS)):
            rows = np.nonzero(sequence == s)[0]
            x[rows] = hidden_states(ref, layer, rng(f"decode/{s}").integers(0, vocab, len(rows)))
        if kind == "attention":  # its input is already normalised
            x = dx.rms_norm(x, ref.tensor(f"model.layers.{layer}.input_layernorm.weight"), ref.eps, True)
        out.append(BlockCase("decode", kind, layer, x, "BF16", extra, positions, sequence, step))
    return out


@dataclass
class GenerationCase:
    name: str
    prompts: List[List[int]]
    new_tokens: int
    prompt_logits: bool
    flags: List[str]  # more generate options

    @property
    def label(self) -> str:
        text = f"{self.name} prompt {'/'.join(str(len(p)) for p in self.prompts)} + {self.new_tokens}"
        return text + (f" ({' '.join(self.flags)})" if self.flags else "")


def generation_cases(model: decoder_models.DecoderModel, prefill_chunk: bool = False) -> List[GenerationCase]:
    """prefill_chunk: the binary has --prefill-chunk; the logits case then also runs its prompt in
    chunks of 5 (each chunk's attention after the cache of the earlier ones)."""
    rng = lambda what: build.rng_for(model.name, what)  # noqa: E731
    logits = [rng("logits").integers(0, model.vocab, LOGITS_PROMPT).tolist()]
    out = [GenerationCase("logits", logits, 1, True, []),
           GenerationCase("greedy", [rng("greedy").integers(0, model.vocab, GREEDY_PROMPT).tolist()], NEW_TOKENS,
                          False, []),
           GenerationCase("greedy-batch", [rng(f"batch/{b}").integers(0, model.vocab, n).tolist()
                                           for b, n in enumerate(BATCH_PROMPTS)], NEW_TOKENS, True,
                          ["--block-size", str(BATCH_BLOCK_SIZE)])]
    if prefill_chunk:
        out.append(GenerationCase("logits-chunked", logits, 1, True, ["--prefill-chunk", str(PREFILL_CHUNK)]))
    return out


# ---- judging an implementation's outputs ------------------------------------------------------------

@dataclass
class Outcome:
    case: str
    passed: bool
    text: str
    near_ties: int = 0
    worst: float = 0.0  # the largest error as a fraction of its budget


def judge_block(ref: dx.Reference, c: BlockCase, y: np.ndarray) -> Outcome:
    want, scale = dx.block(ref, c.layer, c.kind, c.x, c.positions, c.sequence, c.step)
    ties = ref.routing_near_ties()
    ref.routing_gaps.clear()
    v = dx.compare(y, want, dx.bound(want, scale, dx.BLOCK))
    return Outcome("", v.passed, v.describe() + (f", {ties} routing near-tie(s)" if ties else ""), ties, v.worst_ratio)


def judge_generation(ref: dx.Reference, what: str, prompt_ids: List[List[int]], ids: List[List[int]],
                     step_logits: Optional[List[np.ndarray]], prompt_logits: Optional[List[np.ndarray]]) -> Outcome:
    """ids [B][N] and the logits they were chosen from (or None) against the reference teacher-forced
    on ids; prompt_logits (or None) against the reference's prompt logits."""
    _, want_prompt, want_steps = dx.decode(ref, prompt_ids, len(ids[0]), forced=ids)
    failures, near_ties, worst, margins = [], 0, 0.0, []
    for b in range(len(prompt_ids)):
        for j, t in enumerate(ids[b]):
            best, margin, share = dx.top2_margin(want_steps[b][j])
            margins.append(share)
            if t != best:
                if share <= 1:
                    near_ties += 1
                else:
                    failures.append(f"sequence {b} step {j}: id {t}, reference argmax {best} "
                                    f"(margin {margin:.3g}, {share:.1f} x the budget)")
        checks = []
        if step_logits is not None:
            checks.append(("step logits", step_logits[b], want_steps[b]))
        if prompt_logits is not None:
            checks.append(("prompt logits", prompt_logits[b], want_prompt[b]))
        for label, got, want in checks:
            v = dx.compare(got, want, dx.logits_bound(want))
            worst = max(worst, v.worst_ratio)
            if not v.passed:
                failures.append(f"sequence {b} {label}: {v.describe()}")
    ties = ref.routing_near_ties()
    gap = f", smallest routing gap {min(ref.routing_gaps):.3f} of sum |x r|" if ref.routing_gaps else ""
    ref.routing_gaps.clear()
    text = (f"worst logits {worst:.3g} of budget, smallest top-2 margin {min(margins):.1f} x the budget{gap}"
            + (f", {near_ties} near-tie(s)" if near_ties else "") + (f", {ties} routing near-tie(s)" if ties else ""))
    if failures:
        text += "; " + "; ".join(failures[:4]) + (f"; ... {len(failures) - 4} more" if len(failures) > 4 else "")
    return Outcome(what, not failures, text, near_ties + ties, worst)


# ---- metrale -------------------------------------------------------------------------------------

def case_file(tmp: str, case: str, what: str) -> str:
    return os.path.join(tmp, f"{case.replace(' ', '-')}.{what}.safetensors")


def run(cmd: List[str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"metrale exit {proc.returncode}: {proc.stderr.strip()[-600:]} (command: {' '.join(cmd)})")
    return proc


def run_block(args, ckpt: str, c: BlockCase, tmp: str):
    case = f"{c.kind}-{c.name}-layer{c.layer}"
    x_path, y_path = case_file(tmp, case, "x"), case_file(tmp, case, "y")
    stored = Tensor("BF16", bf16_bits(c.x)) if c.x_dtype == "BF16" else tensor("F32", c.x)
    save(x_path, {"x": stored, **c.extra})
    cmd = [args.metrale, "run", "--weights", ckpt, "--layer", str(c.layer), "--block", c.kind, "--input", x_path,
           "--output", y_path, "--quiet", "--json", "--repeat", "1", "--warmup", "0"]
    run(cmd)
    y = load(y_path)["y"]
    if y.dtype != "BF16" or list(y.data.shape) != list(c.x.shape):
        raise RuntimeError(f"y is {y.dtype} {list(y.data.shape)}, expected BF16 {list(c.x.shape)}")
    return bf16_value(y.data)


def run_generate(args, ckpt: str, g: GenerationCase, tmp: str):
    """(ids [B][N], step logits [B][N, V], prompt logits [B][L_b, V] or None) from metrale."""
    out_path = case_file(tmp, g.name, "out")
    cmd = [args.metrale, "generate", "--weights", ckpt, "--max-new-tokens", str(g.new_tokens), "--output", out_path,
           "--json", "--quiet"] + g.flags
    if len(g.prompts) == 1:
        cmd += ["--prompt-ids", ",".join(str(t) for t in g.prompts[0])]
    else:
        longest = max(len(p) for p in g.prompts)
        ids = np.zeros((len(g.prompts), longest), dtype=np.int64)
        for b, p in enumerate(g.prompts):
            ids[b, :len(p)] = p
        batch_path = case_file(tmp, g.name, "batch")
        save(batch_path, {"ids": tensor("I32", ids), "lengths": tensor("I64", [len(p) for p in g.prompts])})
        cmd += ["--batch-file", batch_path]
    if g.prompt_logits:
        cmd.append("--prompt-logits")
    proc = run(cmd)
    out = load(out_path)
    batch = len(g.prompts)
    ids = out["ids"].data.astype(np.int64)
    if list(ids.shape) != [batch, g.new_tokens]:
        raise RuntimeError(f"ids is {list(ids.shape)}, expected [{batch}, {g.new_tokens}]")
    logits = out["logits"].data.astype(np.float64)
    doc = json.loads(proc.stdout)
    generated = [s["generated"] for s in doc["sequences"]]
    if generated != ids.tolist():
        raise RuntimeError(f"--json generated {generated} but the file's ids are {ids.tolist()}")
    prompt = None
    if g.prompt_logits:
        pl = out["prompt_logits"].data.astype(np.float64)
        prompt = []
        for b, p in enumerate(g.prompts):
            if np.any(pl[b, len(p):] != 0):
                raise RuntimeError(f"prompt_logits of sequence {b} are not 0 past its length {len(p)}")
            prompt.append(pl[b, :len(p)])
    return ids.tolist(), [logits[b] for b in range(batch)], prompt


def check_model(args, model: decoder_models.DecoderModel, tmp: str) -> List[Outcome]:
    ckpt = os.path.join(tmp, "ckpt")
    decoder_models.write_model(ckpt, model)
    ck = expected.Checkpoint(ckpt)
    ref = dx.Reference(ck)
    cases = block_cases(model, ref)
    ref.routing_gaps.clear()  # those of building the inputs
    outcomes = []
    for c in cases:
        label = f"{model.name} block {c.kind} {c.name} layer {c.layer} m={c.x.shape[0]}"
        try:
            o = judge_block(ref, c, run_block(args, ckpt, c, tmp))
        except (RuntimeError, KeyError, ValueError, OSError) as e:
            o = Outcome("", False, str(e))
        o.case = label
        outcomes.append(o)
    for g in generation_cases(model, args.prefill_chunk):
        label = f"{model.name} {g.label}"
        try:
            ids, steps, prompt = run_generate(args, ckpt, g, tmp)
            o = judge_generation(ref, label, g.prompts, ids, steps, prompt)
        except (RuntimeError, KeyError, ValueError, OSError, json.JSONDecodeError) as e:
            o = Outcome(label, False, str(e))
        o.case = label
        outcomes.append(o)
    return outcomes


# ---- self-test: the budget accepts f32 arithmetic and rejects each bug -------------------------------

def self_test_model(model: decoder_models.DecoderModel, tmp: str) -> List[str]:
    """Returns the problems found; prints one line per implementation."""
    ckpt = os.path.join(tmp, "ckpt")
    decoder_models.write_model(ckpt, model)
    ck = expected.Checkpoint(ckpt)
    ref = dx.Reference(ck)
    cases = block_cases(model, ref)
    ref.routing_gaps.clear()
    problems = []
    for variant in ["f32"] + [p for p in dx.PERTURBATIONS if dx.applies(p, ck.config)]:
        impl = dx.make(ck, variant)
        results = []
        for c in cases:
            y, _ = dx.block(impl, c.layer, c.kind, c.x, c.positions, c.sequence, c.step)
            o = judge_block(ref, c, y)
            results.append((f"{c.kind} {c.name}", o))
        for g in generation_cases(model):
            n = g.new_tokens if variant == "f32" else min(g.new_tokens, PERTURBED_TOKENS)
            ids, prompt_logits, step_logits = dx.decode(impl, g.prompts, n)
            results.append((g.name, judge_generation(ref, g.name, g.prompts, ids, step_logits, prompt_logits)))
        failed = [name for name, o in results if not o.passed]
        block_failed = [n for n in failed if n.startswith(("decoder", "attention"))]
        model_failed = [n for n in failed if not n.startswith(("decoder", "attention"))]
        worst = max(o.worst for _, o in results)
        if variant == "f32":
            ok = not failed
            detail = "; ".join(f"{name}: {o.text}" for name, o in results)
            print(f"{'ok  ' if ok else 'FAIL'} {model.name} f32 implementation accepted, worst {worst:.3g} of "
                  f"budget: {detail}")
            if not ok:
                problems.append(f"{model.name}: the f32 implementation fails {', '.join(failed)}")
        else:
            ok = bool(block_failed) and bool(model_failed)
            print(f"{'ok  ' if ok else 'FAIL'} {model.name} {variant}: worst {worst:.3g} of budget, rejected by "
                  f"{', '.join(failed) or 'nothing'}")
            if not ok:
                problems.append(f"{model.name}: {variant} ({dx.PERTURBATIONS[variant]}) is not rejected by "
                                f"{'the block cases' if not block_failed else 'the logits / greedy cases'}")
    return problems


def backend_loaded(args) -> bool:
    probe = subprocess.run([args.metrale, "--json", "list"], capture_output=True, text=True)
    try:
        rows = json.loads(probe.stdout)
    except json.JSONDecodeError:
        return False
    return any(r.get("backend") == "cpu" and r.get("state") == "loaded" for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metrale", help="the metrale binary")
    parser.add_argument("--model", action="append", help="a model name (repeatable; default all): see --list")
    parser.add_argument("--self-test", action="store_true", help="check the budget against an f32 "
                        "implementation and the perturbations (no metrale)")
    parser.add_argument("--list", action="store_true", help="list the models")
    parser.add_argument("--keep", metavar="DIR", help="write the checkpoints and every case's files under DIR/MODEL "
                        "and keep them (a failure names the command that ran)")
    args = parser.parse_args()
    chosen = [m for m in decoder_models.all_models() if not args.model or m.name in args.model]
    if args.model and len(chosen) != len(args.model):
        parser.error(f"unknown model; known: {', '.join(m.name for m in decoder_models.all_models())}")
    if args.list:
        for m in chosen:
            print(decoder_models.describe(m))
        return 0
    if not args.self_test and not args.metrale:
        parser.error("--metrale is needed to run the tests")
    if not args.self_test and not backend_loaded(args):
        print("the cpu backend is not loaded; skipping", file=sys.stderr)
        return 77
    args.prefill_chunk = not args.self_test and "--prefill-chunk" in subprocess.run(
        [args.metrale, "generate", "--help"], capture_output=True, text=True).stdout
    failed = []
    total = 0
    for m in chosen:
        tmp = os.path.join(args.keep, m.name) if args.keep else tempfile.mkdtemp(prefix="metrale-decoder-")
        os.makedirs(tmp, exist_ok=True)
        try:
            if args.self_test:
                failed += self_test_model(m, tmp)
                continue
            for o in check_model(args, m, tmp):
                total += 1
                print(f"{'PASS' if o.passed else 'FAIL'} {o.case}: {o.text}", flush=True)
                if not o.passed:
                    failed.append(o.case)
        finally:
            if not args.keep:
                shutil.rmtree(tmp, ignore_errors=True)
    if args.self_test:
        print("\n".join(failed) if failed else f"self-test: {len(chosen)} models, the budget accepts the f32 "
              "implementation and rejects every perturbation")
        return 1 if failed else 0
    print(f"{total - len(failed)} passed, {len(failed)} failed")
    if failed:
        print("failed cases:\n  " + "\n  ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
