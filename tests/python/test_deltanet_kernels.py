# SPDX-License-Identifier: MIT OR Apache-2.0
"""The CPU backend's deltanet kernels (docs/kernels.md, module `deltanet`), launched by name on
numpy arrays, against the float64 reference of transformers' math (tests/checkpoints/
deltanet_reference.py, itself checked against transformers by checkpoints-deltanet-reference).

The kernels see bf16 inputs; the reference gets the same values in float64, and beta rounded to
bf16 where the contract rounds it (transformers' bf16 sigmoid). Budgets, per value head:
- delta rule (recurrent and chunked): the contract's, |out - ref| <= 2^-8 max|ref| + one bf16
  step of ref, and |S - S_ref| <= 2^-8 max|S_ref| after the run;
- conv_silu: one bf16 step of silu(y) plus 1.1 * 2^-8 |y| (y rounded to bf16 before the SiLU,
  whose slope is below 1.1), the window exactly the run's last inputs;
- gated_norm: 2^-7 |ref| (two bf16 roundings, each within 2^-8 of its value).
Several runs in one launch, each its own slot in an order of their own, a row that no run names
and a slot that no run uses (both untouched); then a decode step of every sequence at once."""
import ml_dtypes
import numpy as np
import pytest

import deltanet_reference as ref

K_HEADS, V_HEADS, K_DIM, V_DIM, TAPS = 2, 4, 64, 32, 4
CHANNELS = 2 * K_HEADS * K_DIM + V_HEADS * V_DIM
CONV_FLOATS = (TAPS - 1) * CHANNELS
STRIDE = CONV_FLOATS + V_HEADS * K_DIM * V_DIM  # floats per slot: window, then S
RUN_ROWS = (600, 70, 1)  # tokens of each sequence's run
SLOT_OF_RUN = (2, 0, 3)  # slot 1 is no run's
BLOCK = (128, 1, 1)


def bf16(x):
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16)


def f64(x):
    return np.asarray(x).astype(np.float64)


def bf16_step(x):
    """The distance between neighbouring bf16 values at |x| (8 significant bits)."""
    mag = np.maximum(np.abs(x), np.finfo(np.float32).tiny)
    return 2.0 ** (np.floor(np.log2(mag)) - 7)


def layout():
    """Runs over the rows with one padding row after the first run: (runs i32 [n][3], rows)."""
    runs, row = [], 0
    for i, (rows, slot) in enumerate(zip(RUN_ROWS, SLOT_OF_RUN)):
        runs.append((row, rows, slot))
        row += rows + (1 if i == 0 else 0)
    return np.array(runs, np.int32), row


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(11)
    runs, m = layout()
    slots = np.zeros((4, STRIDE), np.float32)
    slots[:, :CONV_FLOATS] = f64(bf16(rng.standard_normal((4, CONV_FLOATS))))  # windows hold bf16 inputs
    slots[:, CONV_FLOATS:] = rng.standard_normal((4, STRIDE - CONV_FLOATS)) * 0.3
    return dict(
        runs=runs, m=m, slots=slots,
        x=bf16(rng.standard_normal((m, CHANNELS))), conv=bf16(rng.standard_normal((CHANNELS, TAPS)) * 0.5),
        qkv=bf16(rng.standard_normal((m, CHANNELS))), a=bf16(rng.standard_normal((m, V_HEADS)) * 2),
        b=bf16(rng.standard_normal((m, V_HEADS)) * 2),
        a_log=np.linspace(-4.0, 1.0, V_HEADS).astype(np.float32),  # forgets within tokens .. keeps for hundreds
        dt_bias=rng.standard_normal(V_HEADS).astype(np.float32))


def window_of(slots, slot):
    return f64(slots[slot, :CONV_FLOATS].reshape(TAPS - 1, CHANNELS))


def state_of(slots, slot):
    return f64(slots[slot, CONV_FLOATS:].reshape(V_HEADS, K_DIM, V_DIM))


def test_conv_silu_equals_reference(cpu, inputs):
    runs, slots = inputs["runs"], inputs["slots"].copy()
    out = np.full((inputs["m"], CHANNELS), 7.0, ml_dtypes.bfloat16)
    cpu.launch(cpu.kernel("deltanet", "conv_silu"), (len(runs), 1, 1), BLOCK,
               [inputs["x"], inputs["conv"], slots.reshape(-1), runs, out, len(runs), CHANNELS, TAPS, STRIDE])
    for first, rows, slot in runs:
        part = slice(first, first + rows)
        y, window = ref.conv(f64(inputs["x"][part]), f64(inputs["conv"]), window_of(inputs["slots"], slot))
        want = ref.silu(y)
        excess = np.abs(f64(out[part]) - want) - (bf16_step(want) + 1.1 * 2.0 ** -8 * np.abs(y))
        assert excess.max() <= 0, f"run of {rows} rows: conv_silu exceeds its budget by {excess.max():.3g}"
        np.testing.assert_array_equal(window_of(slots, slot), window, err_msg=f"window of slot {slot}")
    assert np.all(f64(out[RUN_ROWS[0]]) == 7.0), "the row that no run names was written"
    np.testing.assert_array_equal(slots[1], inputs["slots"][1], err_msg="slot 1 (no run's) changed")


def reference_run(inputs, part, state):
    q, k, v = ref.split_qkv(f64(inputs["qkv"][part]), K_HEADS, V_HEADS, K_DIM, V_DIM)
    g, beta = ref.gates(f64(inputs["a"][part]), f64(inputs["b"][part]), f64(inputs["a_log"]), f64(inputs["dt_bias"]))
    return ref.delta_rule_recurrent(q, k, v, g, f64(bf16(beta)), state)  # the contract's beta = bf16(sigmoid(b))


def check_rule(out, want, state, want_state, what):
    """The documented budget, per value head."""
    got = f64(out).reshape(want.shape)
    head_max = np.abs(want).max(axis=(0, 2), keepdims=True)
    excess = np.abs(got - want) - (2.0 ** -8 * head_max + bf16_step(want))
    assert excess.max() <= 0, f"{what}: output exceeds its budget by {excess.max():.3g} (head max {head_max.max():.3g})"
    state_err = np.abs(state - want_state).max(axis=(1, 2)) / np.abs(want_state).max(axis=(1, 2))
    assert state_err.max() <= 2.0 ** -8, f"{what}: state error {state_err.max():.3g} of its head's largest"


def launch_rule(cpu, name, inputs, runs, slots, out):
    cpu.launch(cpu.kernel("deltanet", name), (len(runs), V_HEADS, 1), BLOCK,
               [inputs["qkv"], inputs["a"], inputs["b"], inputs["a_log"], inputs["dt_bias"],
                slots.reshape(-1)[CONV_FLOATS:], runs, out, len(runs), K_HEADS, V_HEADS, K_DIM, V_DIM, STRIDE])


@pytest.mark.parametrize("name", ["delta_rule_recurrent", "delta_rule_chunked"])
def test_delta_rule_equals_reference(cpu, inputs, name):
    runs, slots = inputs["runs"], inputs["slots"].copy()
    out = np.full((inputs["m"], V_HEADS * V_DIM), 7.0, ml_dtypes.bfloat16)
    launch_rule(cpu, name, inputs, runs, slots, out)
    for first, rows, slot in runs:
        part = slice(first, first + rows)
        want, want_state = reference_run(inputs, part, state_of(inputs["slots"], slot))
        check_rule(out[part], want, state_of(slots, slot), want_state, f"{name}, run of {rows} rows")
    assert np.all(f64(out[RUN_ROWS[0]]) == 7.0), "the row that no run names was written"
    np.testing.assert_array_equal(slots[1], inputs["slots"][1], err_msg="slot 1 (no run's) changed")

    # A decode step of every sequence at once, each continuing the state the launch above left.
    before = slots.copy()
    step_rows = np.array([run[0] for run in runs])  # each sequence's next token: rows of the inputs
    step = dict(inputs, qkv=inputs["qkv"][step_rows], a=inputs["a"][step_rows], b=inputs["b"][step_rows])
    step_runs = np.array([(i, 1, slot) for i, (_, _, slot) in enumerate(runs)], np.int32)
    step_out = np.empty((len(runs), V_HEADS * V_DIM), ml_dtypes.bfloat16)
    launch_rule(cpu, "delta_rule_recurrent", step, step_runs, slots, step_out)
    for i, (_, _, slot) in enumerate(runs):
        want, want_state = reference_run(step, slice(i, i + 1), state_of(before, slot))
        check_rule(step_out[i:i + 1], want, state_of(slots, slot), want_state, f"decode step after {name}, slot {slot}")


@pytest.mark.parametrize("in_place", [False, True])
def test_gated_norm_equals_reference(cpu, in_place):
    rng = np.random.default_rng(13)
    rows, eps = 37, 1e-6
    x, z = bf16(rng.standard_normal((rows, V_DIM)) * 3), bf16(rng.standard_normal((rows, V_DIM)) * 2)
    weight = rng.standard_normal(V_DIM).astype(np.float32)
    want = ref.gated_norm(f64(x), f64(z), f64(weight), eps)
    y = x.copy() if in_place else np.empty_like(x)
    cpu.launch(cpu.kernel("deltanet", "gated_norm"), (rows, 1, 1), BLOCK,
               [y if in_place else x, z, weight, y, rows, V_DIM, eps])
    excess = np.abs(f64(y) - want) - 2.0 ** -7 * 1.01 * np.abs(want)
    assert excess.max() <= 0, f"gated_norm exceeds its budget by {excess.max():.3g}"
