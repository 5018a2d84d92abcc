#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""The hybrid models (Gated DeltaNet + gated attention) against transformers itself.

  run_hybrid_tests.py --metrale PATH [--model NAME ...] [--keep DIR]

Each model is a tiny random checkpoint written by transformers' own config class and
save_pretrained (bf16): qwen3_next in its release form (full_attention_interval instead of
layer_types, a top-level partial_rotary_factor), qwen3_5_text, qwen3_5 (the
Qwen3_5ForConditionalGeneration wrapper with a vision tower and tied embeddings), and Qwen3.5-MoE
in both forms its experts come in: transformers' save_pretrained writes them per expert
(experts.<E>.{gate,up,down}_proj.weight: qwen3_5_moe_text-per-expert, as saved), the released
checkpoints fused (experts.gate_up_proj [E, 2I, H] and experts.down_proj [E, H, I] in bf16, no
.weight: qwen3_5_moe-fused, the wrapper, rewritten with the safetensors package). A name
"<case>-fused" or "<case>-per-expert" rewrites any case's experts so (--model qwen3_next-fused).
Every norm, the
DeltaNet's convolution, A_log and dt_bias are randomised so that the state carried from token to
token matters (transformers' own init forgets within a token, which would hide a state bug).

For each model, metrale generate's greedy ids must be transformers' float32 choices, checked
step by step against transformers' logits for the same prefix (teacher forcing; a step whose
top-2 margin lies within transformers' own bf16-vs-f32 spread is a near-tie, excused), for prompts
of 1, 37 and 300 tokens; the 300-token prompt again in prefill chunks of 37 with KV blocks of 8
(not a multiple of the DeltaNet's chunk of 64); and a batch of 5 prompts of different lengths,
whose ids must equal each prompt's run alone (dense models; a MoE model's batch is held to
transformers' choices: its expert rows are not batch-invariant). Exit 1 naming every failure, 77 when torch or
transformers is missing or the CPU backend is not loaded.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np
    import torch
    import transformers
except ImportError as e:
    print(f"skipped: {e} (the hybrid tests need torch and transformers; .ci/test-all makes .venv-transformers)")
    sys.exit(77)

from safetensors_np import save, tensor  # noqa: E402

NEW_TOKENS = 8
VOCAB = 512
TEXT = dict(hidden_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=256, intermediate_size=512,
            num_hidden_layers=4, vocab_size=VOCAB, max_position_embeddings=4096, rms_norm_eps=1e-6,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32,
            linear_conv_kernel_dim=4, tie_word_embeddings=False,
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"])
INTERVAL = 2  # the layer_types above as Qwen3-Next's release form says them


def model_cases():
    t = transformers
    return {
        "qwen3_5_text": lambda: t.Qwen3_5TextConfig(**TEXT),
        "qwen3_5": lambda: t.Qwen3_5Config(
            text_config=dict(TEXT), tie_word_embeddings=True,
            vision_config=dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=256)),
        "qwen3_next": lambda: t.Qwen3NextConfig(**TEXT, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128,
                                                shared_expert_intermediate_size=128, norm_topk_prob=True,
                                                mlp_only_layers=[0]),
        # No norm_topk_prob: Qwen3.5-MoE's router always renormalises. Every layer is MoE.
        "qwen3_5_moe-fused": lambda: t.Qwen3_5MoeConfig(
            text_config=dict(MOE_TEXT), tie_word_embeddings=False,
            vision_config=dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=256)),
        "qwen3_5_moe_text-per-expert": lambda: t.Qwen3_5MoeTextConfig(**MOE_TEXT),
    }


MOE_TEXT = {**{k: v for k, v in TEXT.items() if k != "intermediate_size"}, "num_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128}
WRAPPERS = {"qwen3_5": "Qwen3_5ForConditionalGeneration", "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration"}


def case_of(name):
    """(the case whose config it is, the experts' form to rewrite to or None): "qwen3_next-fused" -> ("qwen3_next", "fused")."""
    for form in ("fused", "per-expert"):
        if name.endswith("-" + form):
            base = name[:-len(form) - 1]
            return (base if base in model_cases() else name, form)
    return name, None


def experts_form(directory, form):
    """Rewrites every layer's experts fused ([E, 2I, H] gate rows then up rows; [E, H, I]; no .weight) or
    per expert (experts.<E>.{gate,up,down}_proj.weight), whichever way they were saved."""
    from safetensors import safe_open
    from safetensors.torch import save_file
    path = os.path.join(directory, "model.safetensors")
    assert os.path.exists(path), "one shard expected"
    with safe_open(path, "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    out, per_expert = {}, {}
    for k, v in tensors.items():
        head, sep, rest = k.partition(".experts.")
        parts = rest.split(".")
        if sep and form == "fused" and parts[0].isdigit():      # <head>.experts.<E>.<proj>.weight
            per_expert.setdefault(head, {})[(int(parts[0]), parts[1])] = v
        elif sep and form == "per-expert" and rest in ("gate_up_proj", "down_proj"):
            for e in range(v.shape[0]):
                if rest == "down_proj":
                    out[f"{head}.experts.{e}.down_proj.weight"] = v[e].contiguous()
                else:
                    gate, up = v[e].chunk(2, dim=0)
                    out[f"{head}.experts.{e}.gate_proj.weight"] = gate.contiguous()
                    out[f"{head}.experts.{e}.up_proj.weight"] = up.contiguous()
        else:
            out[k] = v
    for head, by in per_expert.items():
        experts = range(1 + max(e for e, _ in by))
        out[f"{head}.experts.gate_up_proj"] = torch.stack([torch.cat([by[e, "gate_proj"], by[e, "up_proj"]]) for e in experts])
        out[f"{head}.experts.down_proj"] = torch.stack([by[e, "down_proj"] for e in experts])
    fused = any(k.endswith("experts.gate_up_proj") for k in out)
    assert fused == (form == "fused") and any(".experts." in k for k in out), f"{directory}: no experts to write {form}"
    save_file(out, path, metadata={"format": "pt"})


def randomise(model, seed):
    """Weights under which every part, and the state carried across tokens, matters."""
    g = torch.Generator().manual_seed(seed)
    u = lambda shape, lo, hi: lo + (hi - lo) * torch.rand(shape, generator=g)  # noqa: E731
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "visual" in name:
                continue
            if name.endswith("linear_attn.norm.weight"):       # the plain (not zero-centred) gated norm
                p.copy_(u(p.shape, 0.7, 1.3))
            elif "norm" in name and p.dim() == 1:               # zero-centred norms: (1 + w)
                p.copy_(u(p.shape, -0.3, 0.3))
            elif name.endswith("A_log"):                        # slow decay: state lives for many tokens
                p.copy_(torch.log(u(p.shape, 0.02, 0.4)))
            elif name.endswith("dt_bias"):
                p.copy_(u(p.shape, -2.0, 0.5))
            elif name.endswith("conv1d.weight"):
                p.copy_(0.6 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                # Mixer outputs and the attention's gate large enough that a wrong gate, rotary or
                # state changes the choices, not just the logits.
                big = ("o_proj", "out_proj", "q_proj", "mlp.gate.weight")
                scale = (2.5 if any(b in name for b in big) else 1.0) / p.shape[-1] ** 0.5
                p.copy_(scale * torch.randn(p.shape, generator=g))


def release_form(directory):
    """Qwen3-Next's released config.json: no layer_types, the interval and a top-level factor."""
    path = os.path.join(directory, "config.json")
    doc = json.load(open(path))
    doc.pop("layer_types", None)
    doc["full_attention_interval"] = INTERVAL
    doc["partial_rotary_factor"] = doc.get("rope_parameters", {}).pop("partial_rotary_factor", 0.25)
    json.dump(doc, open(path, "w"), indent=2)


def write_model(root, name):
    case, form = case_of(name)
    config = model_cases()[case]()
    torch.manual_seed(0)
    wrapper = WRAPPERS.get(config.model_type)
    if wrapper:
        model = getattr(transformers, wrapper)._from_config(config, dtype=torch.float32)
    else:
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomise(model, seed=sum(map(ord, case)))
    d = os.path.join(root, name)
    model.to(torch.bfloat16)
    if case == "qwen3_5":
        # As the released Qwen3.5 checkpoints: A_log and the DeltaNet's norm in F32 among bf16 tensors.
        for n, p in model.named_parameters():
            if n.endswith("A_log") or n.endswith("linear_attn.norm.weight"):
                p.data = p.data.float()
    model.save_pretrained(d)
    if case == "qwen3_next":
        release_form(d)
    if form:
        experts_form(d, form)
    return d


def load(d, dtype):
    wrapper = WRAPPERS.get(json.load(open(os.path.join(d, "config.json")))["model_type"])
    if wrapper:
        return getattr(transformers, wrapper).from_pretrained(d, dtype=dtype)
    return transformers.AutoModelForCausalLM.from_pretrained(d, dtype=dtype)


def metrale_generate(metrale, d, prompts, extra=()):
    if len(prompts) == 1:
        args = ["--prompt-ids", ",".join(map(str, prompts[0]))]
    else:
        width = max(map(len, prompts))
        ids = np.zeros((len(prompts), width), np.int32)
        for i, p in enumerate(prompts):
            ids[i, :len(p)] = p
        path = d.rstrip("/") + "-batch.safetensors"  # beside, not inside: every file inside is read as weights
        save(path, {"ids": tensor("I32", ids), "lengths": tensor("I32", np.array([len(p) for p in prompts], np.int32))})
        args = ["--batch-file", path]
    cmd = [metrale, "generate", "--weights", d, *args, "--max-new-tokens", str(NEW_TOKENS), "--quiet", "--json", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"metrale exit {r.returncode}: {r.stderr.strip()[-600:]}")
    return [s["generated"] for s in json.loads(r.stdout)["sequences"]]


def teacher_forced(models, prompt, ids):
    """The first step where metrale's id is not transformers' f32 choice beyond a near-tie, or None; and the near-ties."""
    sequence = torch.tensor([prompt + ids[:-1]])
    logits = {}
    for dtype, m in models.items():
        with torch.no_grad():
            logits[dtype] = m(sequence).logits[0, len(prompt) - 1:].double()
    f32, bf16 = logits[torch.float32], logits[torch.bfloat16]
    ties = 0
    for i, chosen in enumerate(ids):
        best = int(f32[i].argmax())
        if best == chosen:
            continue
        margin = float(f32[i][best] - f32[i][chosen])
        spread = float((bf16[i] - f32[i]).abs().max())
        if margin <= 2 * spread:
            ties += 1
            continue
        return f"step {i}: metrale chose {chosen}, transformers {best} (margin {margin:.4f}, own spread {spread:.4f})", ties
    return None, ties


def check_model(metrale, root, name):
    d = write_model(root, name)
    models = {dt: load(d, dt).eval() for dt in (torch.float32, torch.bfloat16)}
    rng = np.random.default_rng(7)
    prompts = {n: rng.integers(0, VOCAB, n).tolist() for n in (1, 37, 300)}
    failures = []
    if name in ("qwen3_5_text", "qwen3_5"):  # one dense text model and the wrapper: the blocks and the output file
        failures += check_blocks(metrale, d, models, name)
    runs = [(f"prompt of {n}", prompts[n], ()) for n in prompts]
    runs.append(("prompt of 300 in chunks of 37, blocks of 8", prompts[300], ("--prefill-chunk", "37", "--block-size", "8")))
    for label, prompt, extra in runs:
        try:
            ids = metrale_generate(metrale, d, [prompt], extra)[0]
        except RuntimeError as e:
            failures.append(f"{name}: {label}: {e}")
            print(f"FAIL {name}: {label}: {e}")
            continue
        wrong, ties = teacher_forced(models, prompt, ids)
        print(f"{'FAIL' if wrong else 'ok  '} {name}: {label}: {NEW_TOKENS} ids, {ties} near-tie(s) excused" +
              (f": {wrong}" if wrong else ""))
        if wrong:
            failures.append(f"{name}: {label}: {wrong}")
        elif ties > NEW_TOKENS // 4:
            failures.append(f"{name}: {label}: {ties} near-ties of {NEW_TOKENS}: too flat to judge")
    # A batch of 5 at different lengths, prefilled in chunks of 37 over blocks of 8 as each prompt
    # alone. Dense models: each sequence's ids are those of its run alone, bit for bit. MoE models:
    # a token's experts' GEMMs see other sequences' rows, which reorders f32 sums (the MoE rows are
    # not batch-invariant), so each sequence is held to transformers' choices instead.
    batch = [prompts[1], prompts[37], prompts[300], rng.integers(0, VOCAB, 5).tolist(), rng.integers(0, VOCAB, 64).tolist()]
    chunked = ("--prefill-chunk", "37", "--block-size", "8")
    moe = getattr(models[torch.float32].config.get_text_config(), "num_experts", 0) > 0
    try:
        together = metrale_generate(metrale, d, batch, chunked)
        if moe:
            verdicts = [teacher_forced(models, p, ids)[0] for p, ids in zip(batch, together)]
            ok = all(v is None for v in verdicts)
            print(f"{'ok  ' if ok else 'FAIL'} {name}: a batch of 5 (1, 37, 300, 5, 64 tokens): every sequence transformers' "
                  f"choices (MoE: not compared bit for bit with its run alone)")
            failures += [f"{name}: batch of 5: sequence {i}: {v}" for i, v in enumerate(verdicts) if v]
        else:
            separate = [metrale_generate(metrale, d, [p], chunked)[0] for p in batch]
            same = [a == b for a, b in zip(together, separate)]
            print(f"{'ok  ' if all(same) else 'FAIL'} {name}: a batch of 5 (1, 37, 300, 5, 64 tokens) equals each alone: {same}")
            if not all(same):
                failures.append(f"{name}: batch of 5: sequences {[i for i, s in enumerate(same) if not s]} differ from their runs alone")
    except RuntimeError as e:
        failures.append(f"{name}: batch of 5: {e}")
        print(f"FAIL {name}: batch of 5: {e}")
    return failures


def text_model(model):
    """The decoder stack of a causal LM or of a wrapper (Qwen3_5ForConditionalGeneration)."""
    inner = model.model
    return inner.language_model if hasattr(inner, "language_model") else inner


def check_blocks(metrale, d, models, name):
    """`metrale run --block decoder` on a DeltaNet layer (0) and a gated attention layer (1) against
    transformers' own decoder layer in float32 on the same bf16 rows; `generate --output
    --prompt-logits` keeps the logits each id was chosen from."""
    from numerics import bf16_bits, bf16_value  # noqa: E402
    from safetensors import safe_open  # noqa: E402
    failures = []
    model = text_model(models[torch.float32])
    x = bf16_value(bf16_bits(np.random.default_rng(3).standard_normal((6, model.config.hidden_size))))
    path = d.rstrip("/") + "-x.safetensors"
    save(path, {"x": tensor("BF16", bf16_bits(x))})
    xt, pos = torch.tensor(x, dtype=torch.float32)[None], torch.arange(6)[None]
    for layer in (0, 1):
        out = d.rstrip("/") + f"-y{layer}.safetensors"
        r = subprocess.run([metrale, "run", "--weights", d, "--layer", str(layer), "--block", "decoder", "--input", path,
                            "--output", out, "--quiet"], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            failures.append(f"{name}: run --block decoder --layer {layer}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
            continue
        with torch.no_grad():
            want = model.layers[layer](xt, position_embeddings=model.rotary_emb(xt, pos), attention_mask=None,
                                       position_ids=pos)
        want = (want[0] if isinstance(want, tuple) else want)[0].double().numpy()
        got = safe_open(out, "pt").get_tensor("y").double().numpy()
        err, bound = float(np.abs(got - want).max()), 2.0 ** -6 * float(np.abs(want).max())
        mixer = model.config.layer_types[layer]
        print(f"{'ok  ' if err <= bound else 'FAIL'} {name}: run --block decoder, layer {layer} ({mixer}): "
              f"max |error| {err:.4f} (bound {bound:.4f})")
        if err > bound:
            failures.append(f"{name}: run --block decoder --layer {layer}: max |error| {err:.4f} > {bound:.4f}")
    out = d.rstrip("/") + "-out.safetensors"
    prompt = [3, 141, 59, 265, 35]
    r = subprocess.run([metrale, "generate", "--weights", d, "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens", "4",
                        "--output", out, "--prompt-logits", "--quiet"], capture_output=True, text=True, timeout=300)
    f = safe_open(out, "np") if r.returncode == 0 else None
    ok = f is not None and (f.get_tensor("logits")[0].argmax(-1) == f.get_tensor("ids")[0]).all() and \
        f.get_tensor("prompt_logits").shape[1] == len(prompt)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: generate --output --prompt-logits: each id its logits row's argmax")
    return failures + ([] if ok else [f"{name}: generate --output --prompt-logits (exit {r.returncode})"])


def cpu_backend_loaded(metrale):
    """Whether `metrale list` shows the CPU backend loaded (the tests run on it)."""
    probe = subprocess.run([metrale, "--json", "list"], capture_output=True, text=True)
    return probe.returncode == 0 and any(e.get("backend") == "cpu" and e.get("state") == "loaded" for e in json.loads(probe.stdout))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metrale", required=True)
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--keep")
    a = ap.parse_args()
    if not cpu_backend_loaded(a.metrale):
        print("skipped: the CPU backend is not loaded")
        return 77
    root = a.keep or tempfile.mkdtemp(prefix="metrale-hybrid-")
    os.makedirs(root, exist_ok=True)
    failures = []
    try:
        for name in a.model or model_cases():
            if case_of(name)[0] not in model_cases():
                raise SystemExit(f"unknown model {name!r}: one of {', '.join(model_cases())}, or a case with -fused / -per-expert")
            failures += check_model(a.metrale, root, name)
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print("failed:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
