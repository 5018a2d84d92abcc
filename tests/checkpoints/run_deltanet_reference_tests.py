#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""The float64 DeltaNet reference (deltanet_reference.py) checked twice, with no metrale involved:

  run_deltanet_reference_tests.py [--tokens N]

1. Its chunked (WY form, chunks of 64) and recurrent forms of the gated delta rule agree on
   --tokens tokens (4096) from a random state, value heads twice the key heads, within 1e-9 of
   the largest output and state per head.
2. It equals transformers' own functions, run in float64 on random inputs, within 1e-10 of the
   largest value: torch_chunk_gated_delta_rule and torch_recurrent_gated_delta_rule (q/k l2norm in
   the kernel, an initial state, a length not a multiple of 64), causal_conv1d_fn and
   causal_conv1d_update with SiLU, the gated RMSNorm, and the gates (A_log, dt_bias, softplus
   beyond its threshold), for both qwen3_next's and qwen3_5's modeling modules. transformers'
   delta-rule functions and gated norm cast to torch.float32 by name; they run here with that name
   bound to float64 in their module for the call (float64_modeling), nothing else changed.
   Without torch or transformers this part is skipped with a message.
   The comparison must also reject deliberately wrong references (key head j % k_heads instead of
   j // (v_heads / k_heads); the l2 epsilon outside the square root): it would not see them else.

Exit 1 naming every failure, 77 without numpy.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np
except ImportError as e:
    print(f"skipped: {e} (the DeltaNet reference needs numpy)")
    sys.exit(77)

import deltanet_reference as ref  # noqa: E402

AGREEMENT = 1e-9    # chunked against recurrent, relative to the largest value per head
TRANSFORMERS = 1e-10  # the reference against transformers in float64, relative to the largest value


def random_case(rng, tokens, k_heads=2, v_heads=4, k_dim=64, v_dim=32):
    """Inputs of one sequence: q, k, v, the gates from a, b, A_log, dt_bias as trained models have
    them (some heads forget within tokens, some keep their state for hundreds), a random state."""
    q = rng.standard_normal((tokens, k_heads, k_dim))
    k = rng.standard_normal((tokens, k_heads, k_dim))
    v = rng.standard_normal((tokens, v_heads, v_dim))
    a_log = np.linspace(-4.0, 1.5, v_heads)
    g, beta = ref.gates(rng.standard_normal((tokens, v_heads)) * 2, rng.standard_normal((tokens, v_heads)) * 2,
                        a_log, rng.standard_normal(v_heads))
    state = rng.standard_normal((v_heads, k_dim, v_dim))
    return q, k, v, g, beta, state


def check_agreement(tokens, failures):
    rng = np.random.default_rng(20)
    q, k, v, g, beta, state = random_case(rng, tokens)
    out_r, state_r = ref.delta_rule_recurrent(q, k, v, g, beta, state)
    out_c, state_c = ref.delta_rule_chunked(q, k, v, g, beta, state)
    for name, got, want in (("output", out_c, out_r), ("state", state_c, state_r)):
        axis = (0, 2) if name == "output" else (1, 2)
        worst = float(np.max(np.max(np.abs(got - want), axis=axis) / np.max(np.abs(want), axis=axis)))
        verdict = "ok" if worst <= AGREEMENT else "FAIL"
        print(f"{verdict}: chunked vs recurrent over {tokens} tokens, {name}: worst per head {worst:.2e} "
              f"(budget {AGREEMENT:.0e})")
        if worst > AGREEMENT:
            failures.append(f"chunked vs recurrent {name}: {worst:.2e}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=4096)
    a = p.parse_args()
    failures = []
    check_agreement(a.tokens, failures)
    try:
        import deltanet_transformers_parity as parity
    except ImportError as e:
        print(f"skipped: the comparison with transformers ({e}; .ci/test-all makes .venv-transformers)")
    else:
        parity.check_all(failures, TRANSFORMERS)
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
