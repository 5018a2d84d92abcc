# SPDX-License-Identifier: MIT OR Apache-2.0
"""Small decoder models as Hugging Face writes their config.json, and where each model type keeps
its FFN tensors. Shapes are small (hidden 256) but every key and name is the real one.

Architectures:
  qwen3        dense: model.layers.L.mlp.{gate,up,down}_proj
  qwen3_moe    mlp.gate (router) + mlp.experts.E.{gate,up,down}_proj, renormalised top-k
  qwen2_moe    the same plus mlp.shared_expert.* and its sigmoid gate mlp.shared_expert_gate
  mixtral      block_sparse_moe.gate + block_sparse_moe.experts.E.{w1 (gate), w3 (up), w2 (down)}
               (transformers 4; layout "tf5": experts.E.{gate,up,down}_proj, as transformers 5 saves
               per-expert modules; layout "fused": mlp.gate + mlp.experts.gate_up_proj/down_proj)
  deepseek_v2  mlp.gate + mlp.experts.E.* + mlp.shared_experts.* (n_shared_experts wide, ungated),
               softmax scoring, greedy top-k, routed_scaling_factor; layers below
               first_k_dense_replace are dense (mlp.{gate,up,down}_proj of intermediate_size)
"""
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

HIDDEN = 256
INTERMEDIATE = 384
EXPERTS = 8
TOP_K = 2
EXPERT_INTERMEDIATE = 128
SHARED_INTERMEDIATE = 256  # Qwen2-MoE's shared expert; DeepSeek's is n_shared_experts x 128
LAYERS = 2
VOCAB = 512
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 64

ARCHS = ("qwen3", "qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v2")

_COMMON = {
    "hidden_size": HIDDEN,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "vocab_size": VOCAB,
    "tie_word_embeddings": False,
    "use_cache": True,
    "transformers_version": "4.51.3",
}


def config_json(arch: str, torch_dtype: str) -> Dict:
    """The config.json keys a real checkpoint of `arch` carries (quantization_config is added by
    the format)."""
    c = dict(_COMMON, torch_dtype=torch_dtype)
    if arch == "qwen3":
        c.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", intermediate_size=INTERMEDIATE,
                 head_dim=HEAD_DIM, rope_theta=1000000.0, attention_bias=False)
    elif arch == "qwen3_moe":
        c.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", intermediate_size=INTERMEDIATE,
                 head_dim=HEAD_DIM, num_experts=EXPERTS, num_experts_per_tok=TOP_K,
                 moe_intermediate_size=EXPERT_INTERMEDIATE, norm_topk_prob=True, decoder_sparse_step=1,
                 mlp_only_layers=[], output_router_logits=False, router_aux_loss_coef=0.001, rope_theta=1000000.0)
    elif arch == "qwen2_moe":
        c.update(architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe", intermediate_size=INTERMEDIATE,
                 num_experts=EXPERTS, num_experts_per_tok=TOP_K, moe_intermediate_size=EXPERT_INTERMEDIATE,
                 shared_expert_intermediate_size=SHARED_INTERMEDIATE, norm_topk_prob=False,
                 decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=False, rope_theta=1000000.0)
    elif arch == "mixtral":
        c.update(architectures=["MixtralForCausalLM"], model_type="mixtral", intermediate_size=EXPERT_INTERMEDIATE,
                 num_local_experts=EXPERTS, num_experts_per_tok=TOP_K, output_router_logits=False,
                 router_aux_loss_coef=0.02, rope_theta=1000000.0, sliding_window=None)
    elif arch == "deepseek_v2":
        c.update(architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2", intermediate_size=INTERMEDIATE,
                 moe_intermediate_size=EXPERT_INTERMEDIATE, n_routed_experts=EXPERTS, num_experts_per_tok=TOP_K,
                 n_shared_experts=2, routed_scaling_factor=2.5, scoring_func="softmax", topk_method="greedy",
                 norm_topk_prob=False, n_group=1, topk_group=1, first_k_dense_replace=1, moe_layer_freq=1,
                 aux_loss_alpha=0.001, seq_aux=True, kv_lora_rank=128, q_lora_rank=None, qk_nope_head_dim=64,
                 qk_rope_head_dim=32, v_head_dim=64)
    else:
        raise ValueError(f"unknown architecture {arch}")
    return c


@dataclass
class Ffn:
    """Where one decoder layer's FFN lives. `experts` empty: dense."""
    kind: str  # "dense" or "moe"
    dense: Optional[Tuple[str, str, str]] = None  # module names of gate, up, down
    router: Optional[str] = None
    experts: Optional[List[Tuple[str, str, str]]] = None
    shared: Optional[Tuple[str, str, str]] = None
    shared_gate: Optional[str] = None
    top_k: int = 0
    renormalize: bool = False
    scaling: float = 1.0


def _gud(prefix: str, names=("gate_proj", "up_proj", "down_proj")) -> Tuple[str, str, str]:
    return tuple(prefix + n for n in names)


LAYOUTS = ("tf4", "tf5", "fused")
GUD = ("gate_proj", "up_proj", "down_proj")
W132 = ("w1", "w3", "w2")


def _mixtral_names(p: str, layout: str, names) -> Tuple[str, str, Tuple[str, str, str]]:
    """(router block, experts block, expert projection names) of a Mixtral layer: from the
    checkpoint's tensor names when given (as a loader must find them), else as `layout` writes
    them. A fused layout reads here as per-expert names (expected.py splits the fused tensors)."""
    if names is None:
        block = "mlp." if layout == "fused" else "block_sparse_moe."
        return block, block, W132 if layout == "tf4" else GUD
    for block in ("block_sparse_moe.", "mlp."):
        for proj in (W132, GUD):
            if any(n.startswith(f"{p}{block}experts.0.{proj[0]}.") for n in names):
                router = next((b for b in ("block_sparse_moe.", "mlp.") if f"{p}{b}gate.weight" in names), block)
                return router, block, proj
    raise ValueError(f"no Mixtral experts under {p}")


def ffn_layout(config: Dict, layer: int, names=None, layout: str = "tf4") -> Ffn:
    """The FFN of decoder layer `layer`, read from a config.json the way the model's code reads it.
    `names` (the checkpoint's tensor names) decide where a MoE's tensors are, as a loader finds
    them; without, `layout` (LAYOUTS) says where a writer puts them."""
    arch = config["model_type"]
    p = f"model.layers.{layer}."
    if arch in ("qwen3", "qwen2", "llama"):
        return Ffn("dense", dense=_gud(p + "mlp."))
    if arch in ("qwen3_moe", "qwen2_moe"):
        step = config.get("decoder_sparse_step", 1)
        if layer in config.get("mlp_only_layers", []) or not (config["num_experts"] > 0 and (layer + 1) % step == 0):
            return Ffn("dense", dense=_gud(p + "mlp."))
        f = Ffn("moe", router=p + "mlp.gate", top_k=config["num_experts_per_tok"],
                renormalize=bool(config.get("norm_topk_prob", False)),
                experts=[_gud(f"{p}mlp.experts.{e}.") for e in range(config["num_experts"])])
        if config.get("shared_expert_intermediate_size", 0):
            f.shared = _gud(p + "mlp.shared_expert.")
            f.shared_gate = p + "mlp.shared_expert_gate"
        return f
    if arch == "mixtral":
        router, block, proj = _mixtral_names(p, layout, names)
        return Ffn("moe", router=p + router + "gate", top_k=config["num_experts_per_tok"], renormalize=True,
                   experts=[_gud(f"{p}{block}experts.{e}.", proj) for e in range(config["num_local_experts"])])
    if arch in ("deepseek_v2", "deepseek_v3"):
        if layer < config.get("first_k_dense_replace", 0) or layer % config.get("moe_layer_freq", 1) != 0:
            return Ffn("dense", dense=_gud(p + "mlp."))
        if config.get("scoring_func", "softmax") != "softmax" or config.get("topk_method", "greedy") != "greedy":
            raise ValueError("these tests route DeepSeek-style MoEs with softmax scoring and greedy top-k only")
        return Ffn("moe", router=p + "mlp.gate", top_k=config["num_experts_per_tok"],
                   renormalize=bool(config.get("norm_topk_prob", False)),
                   scaling=float(config.get("routed_scaling_factor", 1.0)),
                   experts=[_gud(f"{p}mlp.experts.{e}.") for e in range(config["n_routed_experts"])],
                   shared=_gud(p + "mlp.shared_experts.") if config.get("n_shared_experts") else None)
    raise ValueError(f"model_type '{arch}' is not one these tests know")


def widths(config: Dict, ffn: Ffn) -> Dict[str, int]:
    """Intermediate widths of the dense / expert / shared-expert projections."""
    arch = config["model_type"]
    expert = config.get("moe_intermediate_size") or config.get("intermediate_size")
    shared = config.get("shared_expert_intermediate_size", 0)
    if arch.startswith("deepseek"):
        shared = expert * (config.get("n_shared_experts") or 0)
    return {"dense": config.get("intermediate_size", 0), "expert": expert, "shared": shared}


def other_modules(config: Dict, layer: int) -> Dict[str, Tuple[int, int]]:
    """Attention projections (quantized like the FFN) of a layer: name -> (N, K)."""
    p = f"model.layers.{layer}.self_attn."
    if config["model_type"].startswith("deepseek"):
        return {p + "q_proj": (HEADS * 96, HIDDEN), p + "kv_a_proj_with_mqa": (128 + 32, HIDDEN),
                p + "kv_b_proj": (HEADS * 128, 128), p + "o_proj": (HIDDEN, HEADS * 64)}
    return {p + "q_proj": (HEADS * HEAD_DIM, HIDDEN), p + "k_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
            p + "v_proj": (KV_HEADS * HEAD_DIM, HIDDEN), p + "o_proj": (HIDDEN, HEADS * HEAD_DIM)}
