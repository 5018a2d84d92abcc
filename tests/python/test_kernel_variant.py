# SPDX-License-Identifier: MIT OR Apache-2.0
"""The kernel developer's pattern (docs/python.md): each W4A16 variant of a backend against a numpy
reference of your own, within the layers' error budget. Copy it; replace the reference, the
variants and the grid with your kernel's."""
import ml_dtypes
import numpy as np
import pytest

import metrale

# variant -> (rows it takes, grid for (m, n)): docs/kernels.md, "Module w4a16".
VARIANTS = {
    "w4a16_gemv": (1, lambda m, n: (-(-n // 64), 1, 1)),
    "w4a16_gemv_b8": (5, lambda m, n: (-(-n // 64), 1, 1)),
    "w4a16_gemm_t": (70, lambda m, n: (-(-n // 128), -(-m // 64), 1)),
    "w4a16_gemm_t_k64": (70, lambda m, n: (-(-n // 128), -(-m // 64), 1)),
}


def reference(x, qweight, scales):
    """y = x W^T in float64 from the canonical layout: 8 codes per u32 along K, (q - 8) * scale per 128."""
    n, k = qweight.shape[0], qweight.shape[1] * 8
    codes = (qweight[:, :, None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF
    w = (codes.reshape(n, k).astype(np.float64) - 8) * np.repeat(scales.astype(np.float64), 128, axis=1)
    xf = x.astype(np.float64)
    return xf @ w.T, np.abs(xf) @ np.abs(w).T


@pytest.fixture(scope="module")
def backend():
    return metrale.Runtime().select("cpu")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_against_numpy_reference(backend, variant):
    kernel = backend.try_kernel("w4a16", variant)
    if kernel is None:
        pytest.skip(f"{variant}: {backend.audit()[-1]['reason']}")
    m, grid = VARIANTS[variant]
    n, k = 200, 512
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    qweight = rng.integers(0, 2**32, (n, k // 8), dtype=np.uint32)
    scales = (rng.random((n, k // 128), dtype=np.float32) * 0.02 + 0.005).astype(np.float16)

    # The backend's weight layout: its repack kernel, when it has one, writes it (docs/kernels.md).
    repack = backend.try_kernel("w4a16", "w4a16_repack")
    q, s = qweight, scales
    if repack is not None:
        q, s = np.empty_like(qweight), np.empty_like(scales)
        backend.launch(repack, (-(-n // 64), 1, 1), (128, 1, 1), [qweight, scales, q, s, n, k, 1])

    y = np.empty((m, n), ml_dtypes.bfloat16)
    backend.launch(kernel, grid(m, n), (128, 1, 1), [x, q, s, y, m, n, k])

    want, magnitude = reference(x, qweight, scales)
    budget = 2.0**-7 * np.abs(want) + 2.0**-12 * magnitude  # the layers' tolerance (layers/reference)
    error = np.abs(y.astype(np.float64) - want)
    worst = np.unravel_index(np.argmax(error - budget), error.shape)
    assert np.all(error <= budget), f"{variant}: y{list(worst)} = {y[worst]}, reference {want[worst]}"
