# SPDX-License-Identifier: MIT OR Apache-2.0
"""The layers from Python: a checkpoint's FFN (the same composition as `metrale run`) on numpy and
torch rows and on device buffers, with what it opened, planned and resolved."""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import metrale
import safetensors_np
from conftest import SOURCE_ROOT, run_cli


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """The embedding test's small GPTQ checkpoints (tests/embed/write_checkpoints.py): dense, moe."""
    out = tmp_path_factory.mktemp("ckpt")
    subprocess.run([sys.executable, os.path.join(SOURCE_ROOT, "tests", "embed", "write_checkpoints.py"), str(out)], check=True)
    return out


def rows(m, hidden, seed=3):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, hidden), dtype=np.float32).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("name,layer,m", [("dense", 1, 5), ("moe", 0, 3)])
def test_checkpoint_ffn_equals_metrale_run(cpu, cli, checkpoints, tmp_path, name, layer, m):
    ffn = metrale.Ffn(cpu, checkpoints / name, layer=layer)
    x = rows(m, ffn.hidden_size)
    y = ffn.forward(x)
    assert y.dtype == ml_dtypes.bfloat16 and y.shape == (m, ffn.hidden_size)
    safetensors_np.save(str(tmp_path / "x.safetensors"), {"x": safetensors_np.Tensor("BF16", x.view(np.uint16))})
    run_cli(cli, "run", "--backend", "cpu", "--weights", str(checkpoints / name), "--layer", str(layer),
            "--input", str(tmp_path / "x.safetensors"), "--output", str(tmp_path / "y.safetensors"),
            "--quiet", "--repeat", "1", "--warmup", "0")
    y_cli = safetensors_np.load(str(tmp_path / "y.safetensors"))["y"].data
    np.testing.assert_array_equal(y.view(np.uint16), y_cli)


def test_info_plan_and_audit(cpu, checkpoints):
    ffn = metrale.Ffn(cpu, checkpoints / "dense", layer=1)
    info = ffn.info
    assert info["layer"] == 1
    assert info["declared"].startswith("gptq")
    assert info["activations"] == "bf16"
    steps = ffn.plan(1)
    assert [s["step"] for s in steps][:1] == ["ffn.gate_up"]
    assert all(len(s["grid"]) == 3 and s["kernel"] for s in steps)
    audit = ffn.audit()
    assert audit and all(r["backend"] == "cpu" for r in audit)
    assert any(r["kernel"] == "w4a16_gemv" and r["outcome"] == "resolved" for r in audit)
    assert json_rows_are_cli_format(audit)


def json_rows_are_cli_format(rows):
    import json
    return json.loads(metrale.to_json(rows)) == rows


def test_forward_kinds_agree(cpu, checkpoints):
    ffn = metrale.Ffn(cpu, checkpoints / "dense", layer=1)
    x = rows(4, ffn.hidden_size)
    bits = ffn.forward(x.view(np.uint16))
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal(ffn.forward(x).view(np.uint16), bits)
    # float32 is rounded to bf16 first, as `metrale run` rounds F32 input.
    np.testing.assert_array_equal(ffn.forward(x.astype(np.float32)).view(np.uint16), bits)
    # Device buffers: the same output.
    x_buffer, y_buffer = cpu.to_device(x), cpu.empty((4, ffn.hidden_size), "bfloat16")
    ffn.forward_into(x_buffer, 4, y_buffer)
    cpu.synchronize()
    out = np.empty((4, ffn.hidden_size), np.uint16)
    y_buffer.copy_to(out)
    np.testing.assert_array_equal(out, bits)


def test_forward_on_torch_tensors(cpu, checkpoints, torch):
    ffn = metrale.Ffn(cpu, checkpoints / "dense", layer=1)
    x = rows(2, ffn.hidden_size)
    y = ffn.forward(torch.from_numpy(x.view(np.uint16).copy()).view(torch.bfloat16))
    assert y.dtype == torch.bfloat16 and tuple(y.shape) == (2, ffn.hidden_size)
    np.testing.assert_array_equal(y.view(torch.int16).numpy().view(np.uint16), ffn.forward(x).view(np.uint16))


def test_errors_name_what_was_wrong(cpu, checkpoints, tmp_path):
    ffn = metrale.Ffn(cpu, checkpoints / "dense", layer=1)
    with pytest.raises(metrale.Error, match=rf"\[m, {ffn.hidden_size}\]"):
        ffn.forward(np.zeros((2, 7), np.uint16))
    with pytest.raises(metrale.Error, match="nothing-here"):
        metrale.Ffn(cpu, tmp_path / "nothing-here", layer=0)
    with pytest.raises(metrale.Refusal):
        metrale.Ffn(cpu, activations="no-such-tier")


def test_synthetic_weights_from_a_preset(cpu):
    ffn = metrale.Ffn(cpu, model="small-dense", seed=2)
    assert ffn.hidden_size == 256
    assert ffn.info["weights_source"] == "synthetic (seed 2)"


def test_example_runs_the_layer_on_tokenized_text(checkpoints):
    pytest.importorskip("tokenizers", reason="the example tokenizes with Hugging Face tokenizers (pip install tokenizers)")
    example = os.path.join(SOURCE_ROOT, "docs", "examples", "python", "ffn_on_tokens.py")
    done = subprocess.run([sys.executable, example, str(checkpoints / "dense"), "1", "metrale runs kernels from Python"],
                          capture_output=True, text=True, env=dict(os.environ, METRALE_BACKENDS_DISABLE="cuda"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tokens:" in done.stdout
    assert "generation needs the decoder" in done.stdout
    assert "backend cpu" in done.stdout
