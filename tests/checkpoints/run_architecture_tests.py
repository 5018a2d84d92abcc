#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Architectures against transformers itself: checkpoints written by transformers' own config
classes and save_pretrained, run through `metrale generate`.

  run_architecture_tests.py --metrale PATH [--part refusals|models|all] [--model NAME ...] [--keep DIR]
  run_architecture_tests.py --list

refusals (transformers' config classes; torch not needed): for each architecture or key metrale
    does not implement (Gemma 3, Phi-3, a relabelled model_type, an unknown rope type, an active
    sliding window, soft-capping, an unknown layer_types entry, erf-GELU, a partial rotary
    factor, ...) the config is saved by save_pretrained beside a model.safetensors that is not a
    safetensors file at all: `generate` must exit 3 naming the key or type, so it refused before
    reading any tensor. Then tensors the spec's table does not name (Phi-3's fused projections
    under qwen3, a bias the config does not declare): exit 3 naming the tensor. And a key in
    no list: a warning naming it, the run goes on.
models (needs torch): every supported architecture (and Llama's biases, Qwen3's model-card YaRN)
    as a tiny random model, every norm and bias randomised, saved in bf16 by save_pretrained.
    metrale's greedy ids for a 7-token prompt must be transformers' float32 greedy choices: each
    step's id is checked against transformers' logits for the same prefix (teacher forcing); a
    step where transformers' top-2 margin lies within its own bf16-vs-f32 spread is a near-tie,
    reported and excused (as the decoder tests do), anything else fails.
One line per case; exit 1 naming every failure, 77 when transformers (or, for models, torch) is
missing or the CPU backend is not loaded.
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
    import transformers
except ImportError as e:
    print(f"skipped: {e} (the architecture tests need transformers; .ci/test-all makes .venv-transformers)")
    sys.exit(77)

from safetensors_np import save, tensor  # noqa: E402

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, LAYERS, VOCAB = 256, 4, 2, 64, 512, 2, 512
COMMON = dict(hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
              intermediate_size=INTER, num_hidden_layers=LAYERS, vocab_size=VOCAB, max_position_embeddings=4096,
              tie_word_embeddings=False)
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=128, norm_topk_prob=True)
PROMPT = [3, 141, 59, 265, 35, 89, 79]
NEW_TOKENS = 16


def run(metrale, directory, extra=()):
    cmd = [metrale, "generate", "--weights", directory, "--prompt-ids", ",".join(map(str, PROMPT)),
           "--max-new-tokens", str(NEW_TOKENS), "--quiet", "--json", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


# ---------------------------------------------------------------------------------------------
# Refusals


def config_dir(root, name, config):
    """config.json as save_pretrained writes it, beside a model.safetensors that no reader accepts."""
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    config.save_pretrained(d)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(b"not a safetensors file: any read of it fails with exit 1")
    return d


def relabelled(root, name, config, **changes):
    d = config_dir(root, name, config)
    path = os.path.join(d, "config.json")
    doc = json.load(open(path))
    doc.update(changes)
    json.dump(doc, open(path, "w"), indent=2)
    return d


def refusal_cases(root):
    """(name, directory, the words the refusal must contain)."""
    t = transformers
    small = dict(COMMON)
    yield ("gemma3", config_dir(root, "gemma3", t.Gemma3Config(text_config=dict(small))), ["model_type", "gemma3"])
    yield ("gemma3_text", config_dir(root, "gemma3_text", t.Gemma3TextConfig(**small)), ["model_type", "gemma3_text"])
    yield ("phi3", config_dir(root, "phi3", t.Phi3Config(**{k: v for k, v in small.items() if k != "head_dim"})),
           ["model_type", "phi3"])
    yield ("qwen3 relabelled gemma3", relabelled(root, "relabelled", t.Qwen3Config(**small), model_type="gemma3"),
           ["model_type", "gemma3"])
    yield ("rope type dynamic", config_dir(root, "rope-dynamic", t.LlamaConfig(
        **small, rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})), ["rope_type", "dynamic"])
    yield ("mistral active sliding window", config_dir(root, "mistral-window", t.MistralConfig(**small, sliding_window=64)),
           ["sliding_window", "64"])
    yield ("qwen3 use_sliding_window", config_dir(root, "qwen3-window", t.Qwen3Config(
        **small, use_sliding_window=True, sliding_window=64, max_window_layers=1)), ["sliding"])
    yield ("qwen3 final_logit_softcapping", config_dir(root, "softcap-final", t.Qwen3Config(**small, final_logit_softcapping=30.0)),
           ["final_logit_softcapping", "30"])
    yield ("qwen3 attn_logit_softcapping", config_dir(root, "softcap-attn", t.Qwen3Config(**small, attn_logit_softcapping=50.0)),
           ["attn_logit_softcapping", "50"])
    yield ("qwen3 linear_attention layer", relabelled(root, "layer-types", t.Qwen3Config(**small),
                                                      layer_types=["full_attention", "linear_attention"]),
           ["layer_types[1]", "linear_attention"])
    yield ("llama erf-gelu", config_dir(root, "gelu", t.LlamaConfig(**small, hidden_act="gelu")), ["hidden_act", "gelu"])
    yield ("llama relu", config_dir(root, "relu", t.LlamaConfig(**small, hidden_act="relu")), ["hidden_act", "relu"])
    yield ("qwen3 partial rotary 0.5", relabelled(root, "partial", t.Qwen3Config(**small), partial_rotary_factor=0.5),
           ["partial_rotary_factor", "0.5"])
    yield ("qwen3 embedding_multiplier", relabelled(root, "multiplier", t.Qwen3Config(**small), embedding_multiplier=12.0),
           ["embedding_multiplier", "12"])
    yield ("qwen3 given MoE keys", relabelled(root, "qwen3-experts", t.Qwen3Config(**small), num_experts=8,
                                             num_experts_per_tok=2, moe_intermediate_size=128),
           ["layer 0", "moe", "qwen3 does not have"])
    yield ("qwen3_5_text DeltaNet state in bf16", relabelled(root, "ssm-dtype", t.Qwen3_5TextConfig(**small),
                                                            mamba_ssm_dtype="bfloat16"), ["mamba_ssm_dtype", "bfloat16"])
    yield ("qwen3_5_text attn_output_gate false", relabelled(root, "no-gate", t.Qwen3_5TextConfig(**small),
                                                             attn_output_gate=False), ["attn_output_gate", "false"])
    yield ("qwen3_next partial rotary 1.5", relabelled(root, "partial-next", t.Qwen3NextConfig(**small), partial_rotary_factor=1.5),
           ["partial_rotary_factor", "1.5"])
    yield ("deepseek_v3 (attention not implemented)", relabelled(root, "deepseek", t.Qwen3Config(**small), model_type="deepseek_v3"),
           ["deepseek_v3", "multi-head latent attention"])


def qwen3_tensors(extra=None, drop=()):
    """A tiny qwen3's tensors by name (zeros: the refusal comes before their values matter)."""
    names = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,), "lm_head.weight": (VOCAB, HIDDEN)}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        names.update({p + "input_layernorm.weight": (HIDDEN,), p + "post_attention_layernorm.weight": (HIDDEN,),
                      p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
                      p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
                      p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
                      p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
                      p + "self_attn.q_norm.weight": (HEAD_DIM,), p + "self_attn.k_norm.weight": (HEAD_DIM,),
                      p + "mlp.gate_proj.weight": (INTER, HIDDEN), p + "mlp.up_proj.weight": (INTER, HIDDEN),
                      p + "mlp.down_proj.weight": (HIDDEN, INTER)})
    names.update(extra or {})
    return {n: tensor("BF16", np.zeros(shape, np.uint16)) for n, shape in names.items() if n not in drop}


def tensor_cases(root):
    fused = {f"model.layers.{layer}.mlp.gate_up_proj.weight": (2 * INTER, HIDDEN) for layer in range(LAYERS)}
    drop = [f"model.layers.{layer}.mlp.{p}_proj.weight" for layer in range(LAYERS) for p in ("gate", "up")]
    cases = [("qwen3 with Phi-3's fused gate_up_proj", qwen3_tensors(fused, drop), "model.layers.0.mlp.gate_up_proj.weight"),
             ("qwen3 with an undeclared o_proj bias", qwen3_tensors({"model.layers.1.self_attn.o_proj.bias": (HIDDEN,)}),
              "model.layers.1.self_attn.o_proj.bias")]
    tied = qwen3_tensors()
    tied["lm_head.weight"] = tensor("BF16", np.full((VOCAB, HIDDEN), 0x3F80, np.uint16))  # 1.0, the embedding 0
    cases.append(("qwen3 tied, its lm_head unlike the embedding", tied, "tie_word_embeddings"))
    for name, tensors, expected in cases:
        d = os.path.join(root, name.replace(" ", "-").replace("'", "").replace(",", ""))
        os.makedirs(d)
        transformers.Qwen3Config(**{**COMMON, "tie_word_embeddings": "tied" in name}).save_pretrained(d)
        save(os.path.join(d, "model.safetensors"), tensors)
        yield name, d, [expected]


def check_refusals(metrale, root):
    failures = []
    for name, directory, words in list(refusal_cases(root)) + list(tensor_cases(root)):
        r = run(metrale, directory)
        message = (r.stderr.strip().splitlines() or [""])[-1]
        ok = r.returncode == 3 and all(w in r.stderr for w in words)
        print(f"{'ok  ' if ok else 'FAIL'} refusal: {name}: exit {r.returncode}: {message}")
        if not ok:
            failures.append(f"refusal {name} (wanted exit 3 naming {words})")
    return failures


# ---------------------------------------------------------------------------------------------
# Models against transformers


def model_cases():
    """name -> (config class, its arguments)."""
    t = transformers
    return {
        "qwen3": (t.Qwen3Config, dict(rope_theta=1e6)),
        "qwen3-yarn": (t.Qwen3Config, dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                                                             "original_max_position_embeddings": 32768},
                                           max_position_embeddings=40960)),
        "qwen3-moe": (t.Qwen3MoeConfig, dict(num_experts=8, decoder_sparse_step=1, mlp_only_layers=[1], **MOE)),
        "qwen2": (t.Qwen2Config, dict(tie_word_embeddings=True)),
        "qwen2-moe": (t.Qwen2MoeConfig, dict(num_experts=8, shared_expert_intermediate_size=256, **MOE)),
        "llama": (t.LlamaConfig, dict(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                       "original_max_position_embeddings": 64})),
        "llama-attention-bias": (t.LlamaConfig, dict(attention_bias=True)),
        "llama-mlp-bias": (t.LlamaConfig, dict(mlp_bias=True)),
        "mistral": (t.MistralConfig, dict(sliding_window=None)),
        "mixtral": (t.MixtralConfig, dict(num_local_experts=8, num_experts_per_tok=2, sliding_window=None)),
    }


def randomise(model, torch, seed):
    """Weights that make every part matter: matrices scaled to keep activations near unit size,
    norms around 1, biases and routers large enough to move the result."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                p.copy_(1 + 0.4 * (torch.rand(p.shape, generator=g) - 0.5))
            elif name.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                scale = (3.0 if name.endswith("mlp.gate.weight") or "router" in name else 1.0) / fan_in ** 0.5
                p.copy_(scale * torch.randn(p.shape, generator=g))


def check_model(metrale, root, name, cls, kwargs, torch):
    config = cls(**{**COMMON, **kwargs})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomise(model, torch, seed=sum(map(ord, name)))
    d = os.path.join(root, name)
    model.to(torch.bfloat16).save_pretrained(d)
    r = run(metrale, d)
    if r.returncode != 0:
        return [f"{name}: metrale exit {r.returncode}: {r.stderr.strip()[-400:]}"]
    ids = json.loads(r.stdout)["sequences"][0]["generated"]
    # transformers on the same bf16 weights, in float32 and in bf16 (its own spread), teacher-forced
    # on metrale's ids: position len(PROMPT) - 1 + i chose generated token i.
    sequence = torch.tensor([PROMPT + ids[:-1]])
    logits = {}
    for dtype in (torch.float32, torch.bfloat16):
        m = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=dtype, attn_implementation="eager")
        with torch.no_grad():
            logits[dtype] = m(sequence).logits[0, len(PROMPT) - 1:].double()
    f32, bf16 = logits[torch.float32], logits[torch.bfloat16]
    failures, ties = [], 0
    for i, chosen in enumerate(ids):
        row = f32[i]
        best = int(row.argmax())
        if best == chosen:
            continue
        margin = float(row[best] - row[chosen])
        spread = float((bf16[i] - row).abs().max())
        if margin <= 2 * spread:
            ties += 1
            continue
        failures.append(f"{name}: step {i}: metrale chose {chosen}, transformers {best} "
                        f"(margin {margin:.4f}, transformers' own bf16-vs-f32 spread {spread:.4f})")
        break
    greedy = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).generate(
        torch.tensor([PROMPT]), max_new_tokens=NEW_TOKENS, do_sample=False)[0, len(PROMPT):].tolist()
    same = sum(a == b for a, b in zip(greedy, ids))
    status = "FAIL" if failures else "ok  "
    print(f"{status} model: {name}: {NEW_TOKENS} ids, {same} equal transformers' own greedy run, {ties} near-tie(s) excused"
          + (f": {failures[0]}" if failures else ""))
    if failures or ties > NEW_TOKENS // 4:
        return failures or [f"{name}: {ties} near-ties of {NEW_TOKENS}: the model is too flat to judge"]
    return []


def check_models(metrale, root, names):
    try:
        import torch
    except ImportError:
        print("skipped: torch is missing (the model comparisons need it)")
        return None
    cases = model_cases()
    failures = []
    for name in names or cases:
        cls, kwargs = cases[name]
        failures += check_model(metrale, root, name, cls, kwargs, torch)
    return failures


def check_warning(metrale, root):
    """A key in no list: one warning naming it, and the run goes on (exit 0)."""
    try:
        import torch
    except ImportError:
        return []
    d = os.path.join(root, "unknown-key")
    config = transformers.Qwen3Config(**COMMON)
    transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16).save_pretrained(d)
    path = os.path.join(d, "config.json")
    doc = json.load(open(path))
    doc["frobnication_level"] = 3
    json.dump(doc, open(path, "w"))
    r = run(metrale, d)
    ok = r.returncode == 0 and "frobnication_level" in r.stderr
    print(f"{'ok  ' if ok else 'FAIL'} warning: an unknown key is named and ignored: exit {r.returncode}")
    return [] if ok else ["the unknown key 'frobnication_level' was not warned about"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metrale")
    ap.add_argument("--part", choices=("refusals", "models", "all"), default="all")
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--keep")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        print("\n".join(model_cases()))
        return 0
    if not a.metrale:
        ap.error("--metrale is required")
    probe = subprocess.run([a.metrale, "--json", "list"], capture_output=True, text=True)
    if probe.returncode != 0 or not any(e.get("backend") == "cpu" and e.get("state") == "loaded" for e in json.loads(probe.stdout)):
        print("skipped: the CPU backend is not loaded")
        return 77
    root = a.keep or tempfile.mkdtemp(prefix="metrale-arch-")
    os.makedirs(root, exist_ok=True)
    try:
        failures = []
        if a.part in ("refusals", "all"):
            failures += check_refusals(a.metrale, root)
            failures += check_warning(a.metrale, root)
        if a.part in ("models", "all"):
            model_failures = check_models(a.metrale, root, a.model)
            if model_failures is None:
                return 77 if a.part == "models" else (1 if failures else 77)
            failures += model_failures
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print("failed:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
