# SPDX-License-Identifier: MIT OR Apache-2.0
"""deltanet_reference.py against transformers' own Gated DeltaNet functions, in float64
(run_deltanet_reference_tests.py, part 2). Importing this module needs torch and transformers.

transformers' delta-rule functions and Qwen3NextRMSNormGated cast their inputs with
`.to(torch.float32)`; float64_modeling binds the name `torch` in their module, for the duration of
the call, to a view of torch whose float32 is float64, so the same code runs in float64."""
import contextlib
import importlib

import numpy as np
import torch
import torch.nn.functional as F

import deltanet_reference as ref

MODULES = ("transformers.models.qwen3_next.modeling_qwen3_next", "transformers.models.qwen3_5.modeling_qwen3_5")


class _TorchInFloat64:
    float32 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


@contextlib.contextmanager
def float64_modeling(module):
    module.torch = _TorchInFloat64()
    try:
        yield module
    finally:
        module.torch = torch


def t64(x):
    return torch.from_numpy(np.ascontiguousarray(x, np.float64))


def gated_norm_class(module):
    return next(getattr(module, n) for n in dir(module) if n.endswith("RMSNormGated"))


# (form, tokens, k_heads, v_heads): a length not a multiple of 64 for the chunked form.
DELTA_RULE_CASES = [("chunked", 200, 2, 4), ("chunked", 64, 3, 3), ("recurrent", 40, 2, 4), ("recurrent", 1, 1, 3)]


def check_delta_rule(module, form, tokens, k_heads, v_heads, rng, reference):
    k_dim, v_dim = 32, 16
    q = rng.standard_normal((tokens, k_heads, k_dim))
    k = rng.standard_normal((tokens, k_heads, k_dim))
    v = rng.standard_normal((tokens, v_heads, v_dim))
    g = -rng.uniform(0.001, 3.0, (tokens, v_heads))
    beta = rng.uniform(0.0, 1.0, (tokens, v_heads))
    state = rng.standard_normal((v_heads, k_dim, v_dim))
    fn = getattr(module, f"torch_{'chunk' if form == 'chunked' else 'recurrent'}_gated_delta_rule")
    with float64_modeling(module):
        out, final = fn(t64(q)[None], t64(k)[None], t64(v)[None], g=t64(g)[None], beta=t64(beta)[None],
                        initial_state=t64(state)[None], output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert out.dtype == torch.float64 and final.dtype == torch.float64, "transformers did not run in float64"
    mine_out, mine_state = reference(q, k, v, g, beta, state)
    return [("output", mine_out, out[0].numpy()), ("state", mine_state, final[0].numpy())]


def check_conv(module, rng):
    channels, taps, tokens = 24, 4, 11
    x = rng.standard_normal((tokens, channels))
    weight = rng.standard_normal((channels, taps))
    out = module.causal_conv1d_fn(t64(x.T)[None], t64(weight), None, activation="silu")
    mine, window = ref.conv_silu(x, weight)
    results = [("conv prefill", mine, out[0].numpy().T)]
    step = rng.standard_normal((1, channels))
    conv_state = t64(window.T)[None].clone()  # [1, C, K - 1], updated in place
    out = module.causal_conv1d_update(t64(step.T)[None], conv_state, t64(weight), None, activation="silu")
    mine, window = ref.conv_silu(step, weight, window)
    results += [("conv update", mine, out[0].numpy().T), ("conv window", window, conv_state[0].numpy().T)]
    return results


def check_norm(module, rng):
    rows, dim, eps = 9, 16, 1e-6
    x, z = rng.standard_normal((rows, dim)) * 3, rng.standard_normal((rows, dim)) * 2
    weight = rng.standard_normal(dim)
    norm = gated_norm_class(module)(dim, eps=eps).double()
    with torch.no_grad():
        norm.weight.copy_(t64(weight))
    with float64_modeling(module), torch.no_grad():
        out = norm(t64(x), t64(z))
    return [("gated norm", ref.gated_norm(x, z, weight, eps), out.numpy())]


def check_gates(rng):
    """The layer's own expression of g and beta (Qwen3NextGatedDeltaNet.forward), in float64."""
    a = np.concatenate([rng.standard_normal(30) * 8, [25.0, 19.0, -30.0]])[:, None]  # both sides of softplus' threshold
    b = rng.standard_normal((a.shape[0], 1)) * 4
    a_log, dt_bias = np.array([0.7]), np.array([1.5])
    g = -t64(a_log).exp() * F.softplus(t64(a) + t64(dt_bias))
    mine_g, mine_beta = ref.gates(a, b, a_log, dt_bias)
    return [("gates g", mine_g, g.numpy()), ("gates beta", mine_beta, t64(b).sigmoid().numpy())]


def key_head_modulo(q, k, v, g, beta, state):
    """A deliberately wrong reference: value head j reads key head j % k_heads."""
    serve = np.arange(v.shape[1]) % q.shape[1]
    per_head = [ref.delta_rule_recurrent(q[:, [h]], k[:, [h]], v[:, [j]], g[:, [j]], beta[:, [j]], state[[j]])
                for j, h in enumerate(serve)]
    return np.concatenate([o for o, _ in per_head], axis=1), np.concatenate([s for _, s in per_head], axis=0)


def eps_outside(q, k, v, g, beta, state):
    """A deliberately wrong reference: l2(x) = x / (sqrt(sum x^2) + 1e-6)."""
    def l2(x):
        return x / (np.sqrt(np.sum(x * x, axis=-1, keepdims=True)) + ref.L2_EPS)
    saved = ref.l2norm
    ref.l2norm = l2
    try:
        return ref.delta_rule_recurrent(q, k, v, g, beta, state)
    finally:
        ref.l2norm = saved


def compare(label, results, budget, failures, expect_fail=False):
    for name, mine, theirs in results:
        worst = float(np.max(np.abs(np.asarray(mine) - theirs)) / np.max(np.abs(theirs)))
        ok = (worst > budget) if expect_fail else (worst <= budget)
        verdict = "ok" if ok else "FAIL"
        what = "rejected (as it must be)" if expect_fail else f"budget {budget:.0e}"
        print(f"{verdict}: {label} {name}: {worst:.2e} ({what})")
        if not ok:
            failures.append(f"{label} {name}: {worst:.2e}" + (" (a wrong reference passed)" if expect_fail else ""))


def check_all(failures, budget):
    for name in MODULES:
        module = importlib.import_module(name)
        short = name.rsplit(".", 1)[-1]
        rng = np.random.default_rng(5)
        forms = {"chunked": ref.delta_rule_chunked, "recurrent": ref.delta_rule_recurrent}
        for form, tokens, k_heads, v_heads in DELTA_RULE_CASES:
            label = f"{short} {form} {tokens} tokens {k_heads}k/{v_heads}v"
            compare(label, check_delta_rule(module, form, tokens, k_heads, v_heads, rng, forms[form]), budget, failures)
        compare(short, check_conv(module, rng), budget, failures)
        compare(short, check_norm(module, rng), budget, failures)
    compare("transformers' expression", check_gates(np.random.default_rng(6)), budget, failures)
    module = importlib.import_module(MODULES[0])
    for wrong in (key_head_modulo, eps_outside):
        rng = np.random.default_rng(7)
        results = check_delta_rule(module, "recurrent", 40, 2, 4, rng, wrong)
        compare(f"wrong reference ({wrong.__name__})", results[:1], budget, failures, expect_fail=True)
