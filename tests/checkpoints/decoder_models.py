# SPDX-License-Identifier: MIT OR Apache-2.0
"""Small WHOLE-model checkpoints (embedding, every decoder layer's norms, attention and FFN, the
final norm, the logits projection) as save_pretrained and the quantization tools write them, for
the decoder tests (run_decoder_tests.py): config.json with the keys transformers writes for the
family, the tensor names of its modeling code, and the linear layers of attention and FFN either
bf16 or quantized by formats.py's quantizer for the tool, which also decides what stays in float
(embed_tokens, lm_head, norms and routers always do).

The weights are random but shaped so the tests can judge a decoder by its outputs:
- activations stay O(1): embeddings of RMS 2, every sublayer adding about 1.5 to it;
- attention matters: scores of standard deviation about 2 (q/k norm weights, or q/k projection
  scales), Qwen2's q/k/v biases as large as the projections;
- greedy decoding is decisive: lm_head row pi(t) is the embedding of token t (a random permutation
  pi), so the next token's logit stands several RMS above the rest while the layers still move
  every logit; with tied embeddings the last layer's FFN adds pi(t)'s embedding instead
  (successor_ffn);
- MoE routing is decisive: each token's embedding carries two of eight orthonormal routing
  directions, and router row e is direction e, so the top 2 experts stand well clear of the third.
"""
import json
import os
from dataclasses import dataclass, field
from typing import Dict, List

import numpy as np

import build
import formats
import models
from numerics import bf16_value, bf16_bits
from safetensors_np import Tensor, save, tensor

HIDDEN = models.HIDDEN
LAYERS = 2
HEADS, KV_HEADS = 4, 2
EMBED_RMS = 2.0  # the embedding's share of the residual stream: the current token stays its largest part
ROUTING_STRENGTH = 12.0  # a routing direction's coefficient beside a token's own part of norm 16 (x EMBED_RMS)


@dataclass
class DecoderModel:
    name: str
    arch: str      # model_type
    fmt: Dict      # formats.py format ({"method": "none"} for save_pretrained in bf16)
    head_dim: int = 64
    vocab: int = 512
    intermediate: int = 384
    tied: bool = False
    successor_ffn: bool = False  # the last layer's FFN maps each token to its successor (tied embeddings)
    extra: Dict = field(default_factory=dict)  # more config.json keys

    @property
    def moe(self) -> bool:
        return self.arch == "qwen3_moe"


def _family(arch: str, fmt: Dict, suffix: str, **kw) -> DecoderModel:
    return DecoderModel(name=f"{arch.replace('_', '')}-{suffix}", arch=arch, fmt=fmt, **kw)


LLAMA3_ROPE = {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
               "original_max_position_embeddings": 256, "rope_type": "llama3"}


def all_models() -> List[DecoderModel]:
    """Each family in bf16 and in one format its models are published in."""
    out = []
    for suffix, fmt in (("bf16", dict(method="none")), ("gptq", dict(method="gptq"))):
        out.append(_family("qwen3", fmt, suffix))
        out.append(_family("qwen3_moe", fmt, suffix))
    # Qwen3's model card for 131072 tokens: YaRN factor 4 over 32768, max_position_embeddings 40960
    # as released (transformers 5: the factor rules, not the ratio of the two).
    out.append(_family("qwen3", dict(method="none"), "yarn-bf16", extra=dict(
        max_position_embeddings=40960,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})))
    for suffix, fmt in (("bf16", dict(method="none")), ("awq", dict(method="awq"))):
        out.append(_family("qwen2", fmt, suffix, tied=True, successor_ffn=True, intermediate=512))
    for suffix, fmt in (("bf16", dict(method="none")), ("ct-int4", dict(method="ct-int4"))):
        out.append(_family("llama", fmt, suffix, head_dim=128, vocab=500, intermediate=512))
    return out


def config_json(m: DecoderModel) -> Dict:
    """config.json as save_pretrained writes it for the family (transformers 4.51)."""
    c = {"attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
         "hidden_size": HIDDEN, "initializer_range": 0.02, "intermediate_size": m.intermediate,
         "max_position_embeddings": 4096, "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
         "num_key_value_heads": KV_HEADS, "rms_norm_eps": 1e-6, "tie_word_embeddings": m.tied,
         "torch_dtype": formats.model_dtype(m.fmt), "transformers_version": "4.51.3", "use_cache": True,
         "vocab_size": m.vocab}
    if m.arch in ("qwen3", "qwen3_moe"):
        c.update(attention_bias=False, head_dim=m.head_dim, max_window_layers=LAYERS, rope_scaling=None,
                 rope_theta=1000000.0, sliding_window=None, use_sliding_window=False)
        if m.arch == "qwen3":
            c.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3")
        else:
            c.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", decoder_sparse_step=1,
                     mlp_only_layers=[], moe_intermediate_size=models.EXPERT_INTERMEDIATE,
                     norm_topk_prob=True, num_experts=models.EXPERTS, num_experts_per_tok=models.TOP_K,
                     output_router_logits=False, router_aux_loss_coef=0.001)
    elif m.arch == "qwen2":  # Qwen2Config has no attention_bias or head_dim: q/k/v always biased
        c.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", max_window_layers=LAYERS,
                 rope_scaling=None, rope_theta=1000000.0, sliding_window=None, use_sliding_window=False)
    elif m.arch == "llama":
        c.update(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=False,
                 head_dim=m.head_dim, mlp_bias=False, pretraining_tp=1, rms_norm_eps=1e-5,
                 rope_scaling=dict(LLAMA3_ROPE), rope_theta=500000.0)
    else:
        raise ValueError(f"no decoder model of type {m.arch}")
    c.update(m.extra)
    return dict(sorted(c.items()))


def attention_modules(m: DecoderModel, layer: int) -> Dict[str, tuple]:
    """q/k/v/o of a layer: name -> (N, K)."""
    p = f"model.layers.{layer}.self_attn."
    q, kv = HEADS * m.head_dim, KV_HEADS * m.head_dim
    return {p + "q_proj": (q, HIDDEN), p + "k_proj": (kv, HIDDEN), p + "v_proj": (kv, HIDDEN),
            p + "o_proj": (HIDDEN, q)}


def ffn_modules(config: Dict, layer: int) -> Dict[str, tuple]:
    ffn = models.ffn_layout(config, layer)
    w = models.widths(config, ffn)
    out = {}
    for names, inter in ([(ffn.dense, w["dense"])] if ffn.kind == "dense" else [(e, w["expert"]) for e in ffn.experts]):
        gate, up, down = names
        out.update({gate: (inter, HIDDEN), up: (inter, HIDDEN), down: (HIDDEN, inter)})
    return out


# Output spread of each projection for inputs of unit RMS: q/k about 1.4 (scores of spread ~2
# without q/k norm), v 1, o and down about 1 (each sublayer adds as much as the embedding holds).
def _gain(module: str, qk_norm: bool) -> float:
    if module.endswith(("q_proj", "k_proj")):
        return 1.0 if qk_norm else 1.4
    if module.endswith("o_proj"):
        return 1.6
    if module.endswith("down_proj"):
        return 2.0
    return 1.0


def linear_weight(m: DecoderModel, module: str, n: int, k: int, qk_norm: bool) -> np.ndarray:
    rng = build.rng_for(m.name, module)
    return rng.standard_normal((n, k)) * (_gain(module, qk_norm) / np.sqrt(k))


def successor_ffn(m: DecoderModel, embed: np.ndarray) -> Dict[str, np.ndarray]:
    """With tied embeddings lm_head cannot favour a successor, so the last layer's dense FFN does:
    a key-value memory with one intermediate unit per token, gate and up rows along the token's
    embedding, the down column adding its successor's embedding and taking back its own, so that
    greedy decoding walks a permutation instead of repeating the last token."""
    p = f"model.layers.{LAYERS - 1}.mlp."
    unit = embed / np.linalg.norm(embed, axis=1, keepdims=True)
    successor = build.rng_for(m.name, "successor").permutation(m.vocab)
    # An input row of unit RMS along token t reads sqrt(H) * cos on its unit; silu(g) * u is ~ (0.6 sqrt(H))^2.
    response = (0.6 * np.sqrt(HIDDEN)) ** 2
    down = np.zeros((HIDDEN, m.intermediate))
    down[:, :m.vocab] = 2.0 * (embed[successor] - embed).T / response
    keys = np.zeros((m.intermediate, HIDDEN))
    keys[:m.vocab] = unit
    return {p + "gate_proj": keys, p + "up_proj": keys.copy(), p + "down_proj": down}


def _routing_directions(m: DecoderModel) -> np.ndarray:
    """[experts, H] orthonormal rows."""
    q, _ = np.linalg.qr(build.rng_for(m.name, "routing").standard_normal((HIDDEN, models.EXPERTS)))
    return q.T


def _float_tensors(m: DecoderModel, config: Dict) -> Dict[str, np.ndarray]:
    """Embedding, norms, lm_head, biases and routers as float64 values (stored in the model dtype)."""
    rng = lambda what: build.rng_for(m.name, what)  # noqa: E731
    own = EMBED_RMS * rng("embed").standard_normal((m.vocab, HIDDEN))  # each token's own part
    embed = own.copy()
    if m.moe:  # two routing directions per token, drawn per token
        directions = _routing_directions(m)
        pick = np.argsort(rng("route-pick").random((m.vocab, models.EXPERTS)), axis=1)[:, :models.TOP_K]
        embed += EMBED_RMS * ROUTING_STRENGTH * directions[pick].sum(axis=1)
    out = {"model.embed_tokens.weight": embed, "model.norm.weight": rng("norm").uniform(0.8, 1.2, HIDDEN)}
    if not m.tied:
        successor = rng("successor").permutation(m.vocab)  # lm_head row successor[t] favours after t
        lm_head = 0.3 * EMBED_RMS * rng("lm_head").standard_normal((m.vocab, HIDDEN))
        lm_head[successor] += own  # not the routing part, which tokens share
        out["lm_head.weight"] = lm_head / np.sqrt(HIDDEN)
    qk_norm = m.arch in ("qwen3", "qwen3_moe")
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        out[p + "input_layernorm.weight"] = rng(p + "ln1").uniform(0.8, 1.2, HIDDEN)
        out[p + "post_attention_layernorm.weight"] = rng(p + "ln2").uniform(0.8, 1.2, HIDDEN)
        if qk_norm:  # per-head RMS of q and k 1..1.8: scores of spread about 2
            out[p + "self_attn.q_norm.weight"] = rng(p + "qn").uniform(1.0, 1.8, m.head_dim)
            out[p + "self_attn.k_norm.weight"] = rng(p + "kn").uniform(1.0, 1.8, m.head_dim)
        if m.arch == "qwen2":
            for proj, spread in (("q_proj", 0.7), ("k_proj", 1.0), ("v_proj", 0.5)):
                n = attention_modules(m, layer)[p + "self_attn." + proj][0]
                out[f"{p}self_attn.{proj}.bias"] = rng(p + proj + "/bias").normal(0.0, spread, n)
        ffn = models.ffn_layout(config, layer)
        if ffn.router:
            out[ffn.router + ".weight"] = _routing_directions(m) + 0.02 * rng(ffn.router).standard_normal(
                (models.EXPERTS, HIDDEN))
    return out


def _store_float(values: np.ndarray, dtype: str) -> Tensor:
    """In the model dtype. Float16 models (AutoAWQ) get values that bf16 holds exactly too, so a
    decoder that converts its float tensors to bf16 runs the very numbers the file holds."""
    if dtype == "BF16":
        return Tensor("BF16", bf16_bits(values))
    return tensor("F16", bf16_value(bf16_bits(values)))


def write_model(directory: str, m: DecoderModel) -> Dict:
    """Writes the checkpoint; returns its config."""
    os.makedirs(directory, exist_ok=True)
    config = config_json(m)
    declared = formats.quantization_config(m.fmt, m.arch)
    if declared is not None:
        config["quantization_config"] = declared
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    weights_file, sidecars = formats.files(m.fmt, m.arch)
    for name, doc in sidecars.items():
        with open(os.path.join(directory, name), "w") as f:
            json.dump(doc, f, indent=2)
    dtype = formats.float_dtype(m.fmt)
    floats = _float_tensors(m, config)
    tensors = {name: _store_float(v, dtype) for name, v in floats.items()}
    memory = successor_ffn(m, floats["model.embed_tokens.weight"]) if m.successor_ffn else {}
    quantize = formats.quantizer(m.fmt)
    qk_norm = m.arch in ("qwen3", "qwen3_moe")
    for layer in range(LAYERS):
        for module, (n, k) in {**attention_modules(m, layer), **ffn_modules(config, layer)}.items():
            w = memory[module] if module in memory else linear_weight(m, module, n, k, qk_norm)
            if formats.left_unquantized(m.fmt, m.arch, module):
                parts = {"weight": _store_float(w, dtype)}
            else:
                parts = quantize(w, build.rng_for(m.name, build.same_input(module) + "/perm"))
            for suffix, t in parts.items():
                tensors[f"{module}.{suffix}"] = t
    save(os.path.join(directory, weights_file), tensors, formats.metadata(m.fmt))
    return config


def describe(m: DecoderModel) -> str:
    fmt = formats.resolved(m.fmt)
    what = "bf16 (save_pretrained)" if fmt["method"] == "none" else json.dumps(m.fmt)
    return (f"{m.name}: {m.arch}, head_dim {m.head_dim}, vocab {m.vocab}, {'tied' if m.tied else 'untied'}, "
            f"{what}")
