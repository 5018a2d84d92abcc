#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""`metrale generate` and `metrale run --block` on a tiny bf16 Qwen3 checkpoint written here:
generation prints ids and rates and writes its output file; a backend without the attn module
(the skeleton) exits 1 naming the missing kernel; METRALE_QK_NORM_ROPE=1 on a backend whose
manifest lacks rope/qk_norm_rope exits 3 naming it; a prompt longer than the KV cache exits 1
naming the sizes; bad ids and a decreasing step schedule are clear errors; --speculate ngram gives
--speculate none's ids and logits; a lock written by
`metrale audit --block model` (or `--block decoder`) is the one generate (run --block) enforces. Numerics are the
checkpoints suite's (tests/checkpoints/run_decoder_tests.py).
Usage: cli_generate_test.py <metrale> <skeleton plugin dir> <cpu plugin dir>. Exit 77 without the CPU backend."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkpoints"))
try:
    import numpy as np
except ImportError:
    print("numpy is missing (Debian: python3-numpy)", file=sys.stderr)
    sys.exit(1)
from numerics import bf16_bits, round_bf16  # noqa: E402
from safetensors_np import Tensor, load, save  # noqa: E402

METRALE, SKELETON_DIR, CPU_DIR = (os.path.abspath(a) for a in sys.argv[1:4])
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def metrale(*args, env=None, expect=0):
    proc = subprocess.run([METRALE, *args], capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode != expect:
        failures.append(f"{' '.join(args)}: exit {proc.returncode}, expected {expect}\n{proc.stderr[-1500:]}")
    return proc


def write_qwen3(path):
    rng = np.random.default_rng(3)
    H, heads, kv, hd, inter, vocab = 256, 4, 2, 64, 256, 128
    config = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": H, "num_attention_heads": heads,
              "num_key_value_heads": kv, "head_dim": hd, "intermediate_size": inter, "hidden_act": "silu",
              "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "vocab_size": vocab, "num_hidden_layers": 1,
              "max_position_embeddings": 4096, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
    t = {"model.embed_tokens.weight": rng.normal(0, 1, (vocab, H)), "model.norm.weight": 1 + rng.normal(0, .1, H)}
    p = "model.layers.0."
    for name, shape in (("self_attn.q_proj", (heads * hd, H)), ("self_attn.k_proj", (kv * hd, H)),
                        ("self_attn.v_proj", (kv * hd, H)), ("self_attn.o_proj", (H, heads * hd)),
                        ("mlp.gate_proj", (inter, H)), ("mlp.up_proj", (inter, H)), ("mlp.down_proj", (H, inter))):
        t[p + name + ".weight"] = rng.normal(0, shape[1] ** -0.5, shape)
    for name, size in (("self_attn.q_norm", hd), ("self_attn.k_norm", hd), ("input_layernorm", H),
                       ("post_attention_layernorm", H)):
        t[p + name + ".weight"] = 1 + rng.normal(0, .1, size)
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    save(os.path.join(path, "model.safetensors"), {k: Tensor("BF16", bf16_bits(round_bf16(v))) for k, v in t.items()})


def check_speculation(work):
    """--speculate ngram, K = 1..4, gives --speculate none's ids and logits (dense and hybrid presets, a batch of
    prompts of different lengths, one repetitive), drafts accepted on tiny-qwen3; with sampling it is refused (exit 3)."""
    batch = os.path.join(work, "spec-batch.safetensors")
    phrase = [10, 200, 31, 400, 55]
    rows = [phrase * 4, [7, 3, 900, 12, 5, 8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [42] + [0] * 19]
    save(batch, {"ids": Tensor("I32", np.array(rows, np.int32)), "lengths": Tensor("I32", np.array([20, 7, 1], np.int32))})
    for preset in ("tiny-qwen3", "tiny-qwen3.5"):
        runs = {}
        for spec, k in (("none", 1), ("ngram", 1), ("ngram", 2), ("ngram", 3), ("ngram", 4)):
            out = os.path.join(work, f"spec-{preset}-{spec}-{k}.safetensors")
            proc = metrale("generate", "--model", preset, "--batch-file", batch, "--max-new-tokens", "16", "--speculate", spec,
                           "--draft-tokens", str(k), "--output", out, "--prompt-logits", "--prefill-chunk", "8", "--json",
                           "--quiet", "--backend", "cpu")
            doc = json.loads(proc.stdout or "{}")
            runs[(spec, k)] = (doc, load(out) if os.path.exists(out) else None)
        plain, plain_out = runs[("none", 1)]
        for (spec, k), (doc, got) in runs.items():
            what = f"{preset} --speculate {spec} --draft-tokens {k}"
            ids = [s.get("generated") for s in doc.get("sequences", [])]
            check(ids and ids == [s.get("generated") for s in plain.get("sequences", [])], f"{what}: ids {ids}")
            check(got is not None and plain_out is not None and all(
                np.array_equal(got[t].data, plain_out[t].data) for t in ("ids", "logits", "prompt_logits")),
                f"{what}: --output's ids, logits and prompt_logits are plain decoding's")
            sp = doc.get("speculation", {})
            drafts = [s.get("drafts") for s in doc.get("sequences", [])]
            if spec == "none":
                check(drafts == [[], [], []] and sp.get("verifications") == 0, f"{what}: no drafts {drafts}, {sp}")
                continue
            # tiny-qwen3's greedy output repeats itself, so drafts get accepted; tiny-qwen3.5's random weights do not.
            accepted = sp.get("accepted_tokens", 0) > 0 or preset != "tiny-qwen3"
            check(sp.get("method") == "ngram" and accepted and 0 <= sp.get("acceptance_rate", -1) <= 1,
                  f"{what}: drafts accepted: {sp}")
            check(sum(len(d) for d in drafts) == sp.get("verifications") and
                  all(1 <= len(step) <= k for d in drafts for step in d), f"{what}: one entry of 1..K ids per verification")
            check(sp.get("mean_accepted_length", -1) >= 0 and doc.get("decode_tokens_per_s", 0) > 0, f"{what}: rates {sp}")
    text = metrale("generate", "--model", "tiny-qwen3", "--batch-file", batch, "--max-new-tokens", "16", "--speculate", "ngram",
                   "--quiet", "--backend", "cpu").stdout
    check("speculate ngram" in text and "drafts accepted" in text, f"generate's text reports the acceptance: {text[-600:]}")
    proc = metrale("generate", "--model", "tiny-qwen3", "--prompt-ids", "1,2", "--speculate", "ngram", "--temperature", "0.5",
                   "--quiet", "--backend", "cpu", expect=3)
    check("--speculate ngram" in proc.stderr and "--temperature" in proc.stderr, f"the refusal names both: {proc.stderr[-300:]}")
    metrale("generate", "--model", "tiny-qwen3", "--prompt-ids", "1,2", "--speculate", "mtp", "--quiet", "--backend", "cpu",
            expect=1)


def main():
    work = tempfile.mkdtemp(prefix="metrale-generate-")
    ckpt = os.path.join(work, "qwen3")
    write_qwen3(ckpt)
    probe = metrale("list", "--json")
    if '"cpu"' not in probe.stdout:
        print("skipped: the CPU backend is not loaded")
        return 77

    out = os.path.join(work, "out.safetensors")
    proc = metrale("generate", "--weights", ckpt, "--prompt-ids", "1,2,3,4,5", "--max-new-tokens", "6", "--output", out,
                   "--json", "--quiet", "--backend", "cpu")
    doc = json.loads(proc.stdout or "{}")
    seqs = doc.get("sequences", [])
    check(len(seqs) == 1 and len(seqs[0].get("generated", [])) == 6, f"generate --json: sequences {seqs}")
    check(doc.get("prefill_tokens") == 5 and doc.get("decode_tokens") == 5, f"token counts {doc.get('prefill_tokens')}, {doc.get('decode_tokens')}")
    check(doc.get("prefill_tokens_per_s", 0) > 0 and doc.get("decode_tokens_per_s", 0) > 0, "rates are reported")
    kernels = {f"{row.get('module')}/{row.get('kernel')}" for row in doc.get("audit", []) if row.get("outcome") == "resolved"}
    for k in ("attn/kv_append", "attn/attn_decode", "attn/attn_prefill", "norm/rms_norm"):
        check(k in kernels, f"the audit has a row for {k}: {sorted(kernels)}")
    # The embedding rows are gathered on the host from the table read in place: no device copy.
    check("embed/embedding" not in kernels, f"no embedding kernel is looked up: {sorted(kernels)}")
    mem = doc.get("memory", {})
    # Every tensor read once (the tied embedding as the head), plus the file's header.
    tensors = mem.get("checkpoint_tensor_bytes", 0)
    check(tensors > 0 and tensors <= mem.get("bytes_read", 0) < tensors + 16384 and mem.get("bytes_mapped") == 128 * 256 * 2 and
          mem.get("bytes_uploaded", 0) > 0 and mem.get("device_weight_bytes", 0) > 0 and mem.get("peak_resident_bytes", 0) > 0,
          f"generate --json reports what loading moved: {mem}")
    if os.path.exists(out):
        got = load(out)
        check(got["ids"].data.shape == (1, 6) and got["ids"].data.ravel().tolist() == seqs[0]["generated"],
              "--output ids are the printed ones")
        check(got["logits"].data.shape == (1, 6, 128), f"logits shape {got['logits'].data.shape}")
    else:
        failures.append("--output was not written")
    text = metrale("generate", "--weights", ckpt, "--prompt-ids", "1,2,3", "--max-new-tokens", "2", "--quiet", "--backend", "cpu")
    for needle in ("sequence 0: prompt 3 tokens, generated", "prefill  3 tokens", "tokens/s", "attn/attn_prefill"):
        check(needle in text.stdout, f"generate's text output has {needle!r}")

    # A lock of the whole model (audit --block model) is the one generate enforces; the FFN's alone
    # leaves the other lookups out, and generate refuses naming them. Likewise --block decoder for run.
    lock = os.path.join(work, "model.lock")
    metrale("audit", "--weights", ckpt, "--block", "model", "--lock", lock, "--backend", "cpu")
    metrale("generate", "--weights", ckpt, "--prompt-ids", "1,2", "--quiet", "--backend", "cpu", env={"METRALE_LOCK": lock})
    ffn_lock = os.path.join(work, "ffn.lock")
    metrale("audit", "--weights", ckpt, "--lock", ffn_lock, "--backend", "cpu")
    proc = metrale("generate", "--weights", ckpt, "--prompt-ids", "1,2", "--quiet", "--backend", "cpu",
                   env={"METRALE_LOCK": ffn_lock}, expect=3)
    check("attn/attn_decode: in the current configuration only" in proc.stderr,
          f"the refusal names the lookups the FFN lock lacks: {proc.stderr[-400:]}")
    decoder_lock = os.path.join(work, "decoder.lock")
    metrale("audit", "--weights", ckpt, "--block", "decoder", "--lock", decoder_lock, "--backend", "cpu")
    one_row = os.path.join(work, "one.safetensors")
    save(one_row, {"x": Tensor("BF16", bf16_bits(round_bf16(np.ones((1, 256)))))})
    metrale("run", "--weights", ckpt, "--block", "decoder", "--input", one_row, "--quiet", "--backend", "cpu",
            env={"METRALE_LOCK": decoder_lock})
    metrale("audit", "--block", "attention", "--backend", "cpu", expect=1)  # it needs a checkpoint

    # The skeleton has no attn module: exit 1 naming the kernel.
    proc = metrale("generate", "--weights", ckpt, "--prompt-ids", "1,2", "--quiet", "--backend", "skeleton",
                   env={"METRALE_MANIFESTS": os.path.join(SKELETON_DIR, "skeleton.json")}, expect=1)
    check("attn/kv_append" in proc.stderr, f"the skeleton's error names attn/kv_append: {proc.stderr[-400:]}")

    # A CPU backend whose manifest lacks the fused kernel, asked for it explicitly: a refusal.
    with open(os.path.join(CPU_DIR, "cpu.json")) as f:
        manifest = json.load(f)
    manifest["library"] = os.path.join(CPU_DIR, manifest["library"])
    for module in manifest["modules"]:
        if module["name"] == "rope":
            module["kernels"] = [k for k in module["kernels"] if k["name"] != "qk_norm_rope"]
    noqk = os.path.join(work, "cpu-noqk.json")
    with open(noqk, "w") as f:
        json.dump(manifest, f)
    env = {"METRALE_MANIFESTS": noqk, "METRALE_QK_NORM_ROPE": "1"}
    proc = metrale("generate", "--weights", ckpt, "--prompt-ids", "1,2", "--quiet", "--backend", "cpu", env=env, expect=3)
    check("rope/qk_norm_rope" in proc.stderr and "METRALE_QK_NORM_ROPE=1" in proc.stderr,
          f"the refusal names the lever and the kernel: {proc.stderr[-400:]}")
    # Unset, the same backend falls back to the separate kernels.
    proc = metrale("generate", "--weights", ckpt, "--prompt-ids", "1,2", "--quiet", "--json", "--backend", "cpu",
                   env={"METRALE_MANIFESTS": noqk})
    kernels = {f"{row.get('module')}/{row.get('kernel')}" for row in json.loads(proc.stdout or "{}").get("audit", [])
               if row.get("outcome") == "resolved"}
    check("rope/rope" in kernels, f"without the fused kernel rope/rope serves: {sorted(kernels)}")

    # Continuous batching from the CLI: two prompts in a batch file, the second arriving at step 3,
    # in a cache with room for one at a time, give the ids each gets alone; seeded sampling repeats.
    batch = os.path.join(work, "batch.safetensors")
    save(batch, {"ids": Tensor("I32", np.array([[5, 9, 2, 7, 1, 3], [8, 8, 4, 0, 0, 0]], np.int32)),
                 "lengths": Tensor("I32", np.array([6, 3], np.int32))})
    both = metrale("generate", "--weights", ckpt, "--batch-file", batch, "--arrival-steps", "0,3", "--max-new-tokens", "5",
                   "--kv-tokens", "12", "--block-size", "4", "--prefill-chunk", "2", "--json", "--quiet", "--backend", "cpu")
    seqs = json.loads(both.stdout or "{}").get("sequences", [{}, {}])
    for i, prompt in enumerate(("5,9,2,7,1,3", "8,8,4")):
        one = metrale("generate", "--weights", ckpt, "--prompt-ids", prompt, "--max-new-tokens", "5", "--prefill-chunk", "2",
                      "--json", "--quiet", "--backend", "cpu")
        alone = json.loads(one.stdout or "{}").get("sequences", [{}])[0]
        check(seqs[i].get("generated") == alone.get("generated"), f"sequence {i} batched {seqs[i]} vs alone {alone}")
    check(seqs[1].get("admitted_step", 0) > seqs[0].get("finished_step", 99),
          f"the second prompt waited for the first's room: {seqs}")
    sampled = [metrale("generate", "--weights", ckpt, "--prompt-ids", "1,2,3", "--max-new-tokens", "8", "--temperature", "1.5",
                       "--top-k", "20", "--sample-seed", "7", "--json", "--quiet", "--backend", "cpu").stdout for _ in range(2)]
    docs = [json.loads(t or "{}") for t in sampled]
    check(docs[0].get("sequences") == docs[1].get("sequences") and "seed 7" in docs[0].get("sampling", ""),
          f"seeded sampling repeats: {docs[0].get('sequences')} vs {docs[1].get('sequences')}")
    metrale("generate", "--weights", ckpt, "--prompt-ids", "1,2", "--temperature", "-1", "--quiet", "--backend", "cpu", expect=1)
    metrale("generate", "--weights", ckpt, "--prompt-ids", "1,2", "--arrival-steps", "0,1", "--quiet", "--backend", "cpu",
            expect=1)

    check_speculation(work)

    # A prompt longer than the cache, and other bad input.
    proc = metrale("generate", "--weights", ckpt, "--prompt-ids", ",".join(["1"] * 20), "--kv-tokens", "16", "--quiet",
                   "--backend", "cpu", expect=1)
    check("20 tokens" in proc.stderr and "16 tokens" in proc.stderr, f"the cache refusal names the sizes: {proc.stderr[-300:]}")
    proc = metrale("generate", "--weights", ckpt, "--prompt-ids", "1,500", "--quiet", "--backend", "cpu", expect=1)
    check("id 500" in proc.stderr and "0..127" in proc.stderr, f"an id outside the vocabulary is named: {proc.stderr[-300:]}")
    metrale("generate", "--weights", ckpt, "--prompt-ids", "1,x", "--quiet", "--backend", "cpu", expect=1)

    # run --block decoder over a schedule: two prompts, then a decode step of both.
    x = round_bf16(np.random.default_rng(5).normal(0, 1, (7, 256)))
    sched = os.path.join(work, "x.safetensors")
    save(sched, {"x": Tensor("BF16", bf16_bits(x)), "sequence": Tensor("I32", np.array([0, 0, 0, 1, 1, 0, 1], np.int32)),
                 "step": Tensor("I32", np.array([0, 0, 0, 1, 1, 2, 2], np.int32))})
    y = os.path.join(work, "y.safetensors")
    proc = metrale("run", "--weights", ckpt, "--block", "decoder", "--input", sched, "--output", y, "--json", "--quiet",
                   "--backend", "cpu")
    doc = json.loads(proc.stdout or "{}")
    check(doc.get("batches") == 3 and doc.get("sequences") == 2, f"run --block decoder: {doc.get('batches')} batches")
    check(os.path.exists(y) and load(y)["y"].data.shape == (7, 256), "run --block writes y [m, hidden]")
    save(sched, {"x": Tensor("BF16", bf16_bits(x)), "step": Tensor("I32", np.array([0, 1, 0, 1, 1, 2, 2], np.int32))})
    proc = metrale("run", "--weights", ckpt, "--block", "attention", "--input", sched, "--quiet", "--backend", "cpu", expect=1)
    check("'step' must not decrease" in proc.stderr, f"a decreasing step is named: {proc.stderr[-300:]}")
    metrale("run", "--block", "decoder", "--quiet", "--backend", "cpu", expect=1)  # no checkpoint

    for f in failures:
        print("FAIL:", f)
    print(f"{'0 failed' if not failures else str(len(failures)) + ' failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
