# SPDX-License-Identifier: MIT OR Apache-2.0
"""Typed launches on host arrays and device buffers: the small-dense FFN (w4a16_repack, two
w4a16_gemv and silu_mul) launched kernel by kernel from numpy equals `metrale run`'s output bit for
bit; host arrays reach the CPU backend without a copy (numpy, torch CPU); buffers export DLPack;
bf16 from ml_dtypes and torch."""
import ml_dtypes
import numpy as np
import pytest

import metrale
import safetensors_np
from conftest import run_cli

HIDDEN, INTERMEDIATE = 256, 512  # preset small-dense


def ceil_div(a, b):
    return -(-a // b)


@pytest.fixture(scope="module")
def cli_run(cli, tmp_path_factory):
    """`metrale run` on small-dense, one row: its weights (canonical W4A16), input and output."""
    d = tmp_path_factory.mktemp("cli_run")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, HIDDEN), dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    safetensors_np.save(str(d / "x.safetensors"), {"x": safetensors_np.Tensor("BF16", x)})
    run_cli(cli, "run", "--backend", "cpu", "--tokens", "1", "--repeat", "1", "--warmup", "0", "--quiet",
            "--save-weights", str(d / "w.safetensors"), "--input", str(d / "x.safetensors"),
            "--output", str(d / "y.safetensors"))
    weights = {name: t.data for name, t in safetensors_np.load(str(d / "w.safetensors")).items()}
    y = safetensors_np.load(str(d / "y.safetensors"))["y"].data
    return x, weights, y


def repacked(cpu, qweight, scales):
    """The backend's layout of one canonical W4A16 matrix, written into numpy arrays."""
    repack = cpu.kernel("w4a16", "w4a16_repack")
    n, k = qweight.shape[0], qweight.shape[1] * 8
    q_out, s_out = np.empty_like(qweight), np.empty_like(scales)
    cpu.launch(repack, (ceil_div(n, 64), 1, 1), (128, 1, 1), [qweight, scales, q_out, s_out, n, k, 1])
    return q_out, s_out


def ffn_from_kernels(cpu, x, weights, out=None):
    gemv = cpu.kernel("w4a16", "w4a16_gemv")
    silu_mul = cpu.kernel("act", "silu_mul")
    gate_q, gate_s = repacked(cpu, weights["ffn.gate_up.qweight"], weights["ffn.gate_up.scales"])
    down_q, down_s = repacked(cpu, weights["ffn.down.qweight"], weights["ffn.down.scales"])
    gate_up = np.empty((1, 2 * INTERMEDIATE), np.uint16)
    cpu.launch(gemv, (ceil_div(2 * INTERMEDIATE, 64), 1, 1), (128, 1, 1), [x, gate_q, gate_s, gate_up, 1, 2 * INTERMEDIATE, HIDDEN])
    act = np.empty((1, INTERMEDIATE), np.uint16)
    cpu.launch(silu_mul, (ceil_div(INTERMEDIATE, 1024), 1, 1), (256, 1, 1), [gate_up, act, 1, INTERMEDIATE])
    y = out if out is not None else np.empty((1, HIDDEN), np.uint16)
    cpu.launch(gemv, (ceil_div(HIDDEN, 64), 1, 1), (128, 1, 1), [act, down_q, down_s, y, 1, HIDDEN, INTERMEDIATE])
    return y


def test_w4a16_gemv_from_numpy_equals_metrale_run_bit_for_bit(cpu, cli_run):
    x, weights, y_cli = cli_run
    y = ffn_from_kernels(cpu, x, weights)
    assert y.dtype == np.uint16 and y.shape == y_cli.shape
    np.testing.assert_array_equal(y, y_cli)


def test_numpy_output_is_written_in_place(cpu, cli_run):
    # The kernel writes into the caller's array itself: no copy in or out.
    x, weights, y_cli = cli_run
    y = np.zeros((1, HIDDEN), np.uint16)
    address = y.ctypes.data
    ffn_from_kernels(cpu, x, weights, out=y)
    assert y.ctypes.data == address
    np.testing.assert_array_equal(y, y_cli)


def aliased_repack(cpu, qweight, scales):
    """w4a16_repack with its output the very memory of its input: the plugin refuses the alias,
    naming both addresses, only if it is handed the caller's own memory (a copy would be apart)."""
    repack = cpu.kernel("w4a16", "w4a16_repack")
    with pytest.raises(metrale.Error, match="'qweight_out' .* overlaps 'qweight_in'") as refused:
        cpu.launch(repack, (1, 1, 1), (128, 1, 1), [qweight, scales, qweight, scales, 64, 128, 1])
    return str(refused.value)


def test_the_kernel_gets_the_numpy_arrays_own_memory(cpu):
    qweight, scales = np.zeros((64, 16), np.uint32), np.zeros((64, 1), np.float16)
    assert f"0x{qweight.ctypes.data:x}" in aliased_repack(cpu, qweight, scales)


def test_the_kernel_gets_the_torch_tensors_own_memory(cpu, torch):
    qweight, scales = torch.zeros((64, 16), dtype=torch.int32), torch.zeros((64, 1), dtype=torch.float16)
    assert f"0x{qweight.data_ptr():x}" in aliased_repack(cpu, qweight, scales)


def test_ml_dtypes_bfloat16_rows_are_accepted(cpu, cli_run):
    x, weights, y_cli = cli_run
    np.testing.assert_array_equal(ffn_from_kernels(cpu, x.view(ml_dtypes.bfloat16), weights), y_cli)


def test_torch_cpu_tensor_passes_without_a_copy(cpu, cli_run, torch):
    x, weights, y_cli = cli_run
    x_t = torch.from_numpy(x.copy()).view(torch.bfloat16)  # torch.bfloat16 through DLPack
    y_t = torch.zeros((1, HIDDEN), dtype=torch.bfloat16)
    pointer = y_t.data_ptr()
    ffn_from_kernels(cpu, x_t, weights, out=y_t)
    assert y_t.data_ptr() == pointer
    np.testing.assert_array_equal(y_t.view(torch.int16).numpy().view(np.uint16), y_cli)


def test_buffers_export_dlpack_without_a_copy(cpu, cli_run):
    x, weights, y_cli = cli_run
    y_buffer = cpu.empty((1, HIDDEN), "uint16")
    view = np.from_dlpack(y_buffer)
    assert view.ctypes.data == y_buffer.address
    assert view.shape == (1, HIDDEN) and view.dtype == np.uint16
    ffn_from_kernels(cpu, cpu.to_device(x), weights, out=y_buffer)
    np.testing.assert_array_equal(view, y_cli)  # the kernel wrote where numpy looks
    back = np.empty_like(y_cli)
    y_buffer.copy_to(back)
    np.testing.assert_array_equal(back, y_cli)


def test_buffer_dlpack_to_torch(cpu, torch):
    b = cpu.to_device(np.arange(8, dtype=np.float32))
    t = torch.from_dlpack(b)
    assert t.data_ptr() == b.address
    assert t.tolist() == list(range(8))
    bf = cpu.empty((4,), "bfloat16")
    assert torch.from_dlpack(bf).dtype == torch.bfloat16


def test_launch_checks_arguments(cpu):
    gemv = cpu.kernel("w4a16", "w4a16_gemv")
    with pytest.raises(metrale.Error, match="takes 7 arguments"):
        cpu.launch(gemv, (1, 1, 1), (128, 1, 1), [1, 2, 3])
    x = np.zeros((1, 128), np.uint16)
    with pytest.raises(metrale.Error, match=r"m: u32\) = -1 is out of range"):
        cpu.launch(gemv, (1, 1, 1), (128, 1, 1), [x, x, x, x, -1, 1, 128])
    with pytest.raises(metrale.Error, match="not C-contiguous"):
        cpu.launch(gemv, (1, 1, 1), (128, 1, 1), [np.zeros((4, 4), np.uint16)[:, ::2], x, x, x, 1, 1, 128])
    with pytest.raises(metrale.Error, match="expected an array"):
        cpu.launch(gemv, (1, 1, 1), (128, 1, 1), ["x", x, x, x, 1, 1, 128])
    # The plugin's own checks still hold on host arrays: too small an x is named.
    with pytest.raises(metrale.Error, match="x"):
        cpu.launch(gemv, (1, 1, 1), (128, 1, 1), [np.zeros(4, np.uint16), np.zeros(64, np.uint32),
                                                 np.zeros(1, np.float16), np.zeros(1, np.uint16), 1, 1, 128])


def test_host_arrays_are_registered_for_one_launch_only(cpu):
    # Were the first launch's registration of a[:1024] left behind, the second's of all of a (which
    # runs past its end) would be refused as a partial overlap.
    silu_mul = cpu.kernel("act", "silu_mul")
    a = np.zeros(4096, np.uint16)
    out = np.ones(2048, np.uint16)
    cpu.launch(silu_mul, (1, 1, 1), (256, 1, 1), [a[:1024], out[:512], 1, 512])
    cpu.launch(silu_mul, (2, 1, 1), (256, 1, 1), [a, out, 1, 2048])
    assert not out.any()  # silu(0) * 0


def test_torch_cuda_tensors_on_the_cuda_backend(runtime, torch):
    cuda = runtime.find("cuda")
    if cuda is None or not torch.cuda.is_available():
        pytest.skip("no CUDA backend loaded or no torch CUDA device here (GPU machines only)")
    # Tensors of the backend's device go to a launch by address, without a copy.
    gate_up = torch.randn((2, 2 * INTERMEDIATE), dtype=torch.bfloat16, device="cuda")
    out = torch.empty((2, INTERMEDIATE), dtype=torch.bfloat16, device="cuda")
    silu_mul = cuda.kernel("act", "silu_mul")
    cuda.launch(silu_mul, (ceil_div(INTERMEDIATE, 1024), 2, 1), (256, 1, 1), [gate_up, out, 2, INTERMEDIATE])
    cuda.synchronize()
    g, u = gate_up.float()[:, :INTERMEDIATE], gate_up.float()[:, INTERMEDIATE:]
    torch.testing.assert_close(out.float(), torch.nn.functional.silu(g) * u, rtol=2 ** -7, atol=2 ** -7)
    y = cuda.empty((4,), "bfloat16")
    assert torch.from_dlpack(y).data_ptr() == y.address
