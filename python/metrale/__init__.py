# SPDX-License-Identifier: MIT OR Apache-2.0
"""metrale from Python: the kernel runtime (backends as plugins, kernels by (module, name), an
audit row per lookup) and its layers, on numpy arrays and torch tensors (docs/python.md).

    import metrale
    runtime = metrale.Runtime()              # loads the plugins: nothing loads at import
    cpu = runtime.select("cpu")              # metrale.Refusal when it cannot be had
    gemv = cpu.kernel("w4a16", "w4a16_gemv") # metrale.Error naming module, name and why
    cpu.launch(gemv, grid, block, [x, qweight, scales, y, m, n, k])   # numpy / torch CPU, no copy
    ffn = metrale.Ffn(cpu, "checkpoint-dir", layer=1)
    y = ffn.forward(x)                       # bf16 in, bf16 out (numpy with ml_dtypes, or torch)
    report = metrale.bench("w4a16_gemm_t*")  # `metrale bench`'s report as objects
"""
from __future__ import annotations

import json as _json
import os as _os
from typing import Any, Optional, Sequence, Union

from ._metrale import (  # noqa: F401  (the public API)
    Backend,
    Buffer,
    Error,
    Kernel,
    Refusal,
    Runtime,
    audit_table,
    diff_audits,
    levers,
)
from . import _metrale
from ._arrays import from_bf16_bits, to_bf16_bits
from ._bench import BenchReport, BenchRow, BenchShape, bench

__all__ = [
    "Backend", "BenchReport", "BenchRow", "BenchShape", "Buffer", "Error", "Ffn", "Kernel", "Refusal", "Runtime",
    "audit_table", "bench", "diff_audits", "enforce_lock", "levers", "lock_differences", "to_json", "write_lock",
]

AuditRows = Sequence[dict]


def to_json(rows: AuditRows) -> str:
    """Audit rows (as `audit()` returns them) as `metrale audit --json` prints them."""
    return _metrale.audit_json(list(rows))


def write_lock(path: Union[str, _os.PathLike], backend: Backend, rows: AuditRows) -> None:
    """Writes a lock of these audit rows, taken on `backend` (METRALE_LOCK=path enforces it)."""
    backend.write_lock(_os.fspath(path), list(rows))


def enforce_lock(backend: Backend, rows: AuditRows) -> None:
    """With METRALE_LOCK set: raises metrale.Refusal listing each difference from the lock."""
    backend.enforce_lock(list(rows))


def lock_differences(lock: Union[str, _os.PathLike, dict], current: AuditRows) -> list[str]:
    """Each difference between a lock (a file, or its parsed document) and the current audit rows."""
    if isinstance(lock, dict):
        text = _json.dumps(lock)
    else:
        with open(lock, encoding="utf-8") as f:
            text = f.read()
    return _metrale.lock_differences(text, list(current))


class Ffn:
    """One decoder layer's FFN, opened as `metrale run` opens it (docs/embedding.md, LayerRequest):
    `weights` a checkpoint directory (its config.json beside it), a .safetensors file or its index,
    or None for synthetic weights from `seed`; `model` a preset or config.json; `layer` the decoder
    layer (default: the lowest with an FFN). Tier options are those of `metrale run`.

    There is no decoder or generation in metrale yet: a model runs one layer's FFN at a time."""

    def __init__(self, backend: Backend, weights: Optional[Union[str, _os.PathLike]] = None, *,
                 layer: Optional[int] = None, model: Optional[Union[str, _os.PathLike]] = None, seed: int = 1,
                 activations: Optional[str] = None, weight_format: Optional[str] = None,
                 expert_format: Optional[str] = None, group_size: Optional[int] = None, per_expert: bool = False):
        self._ffn = _metrale.EmbeddedFfn(
            backend, _os.fspath(weights) if weights is not None else "", _os.fspath(model) if model is not None else "",
            layer, seed, activations, weight_format, expert_format, group_size, per_expert)

    @property
    def hidden_size(self) -> int:
        return self._ffn.hidden_size

    @property
    def info(self) -> dict:
        """What was opened and the tiers it runs, as `metrale run` reports them."""
        return self._ffn.info

    @property
    def backend(self) -> Backend:
        return self._ffn.backend

    def forward(self, x: Any, stream: int = 0) -> Any:
        """y = FFN(x) for rows x [m, hidden_size] on the host: a torch tensor (bfloat16, or float32
        rounded to bf16) gives a torch bfloat16 tensor; a numpy array (ml_dtypes.bfloat16, or float
        rounded to bf16) gives an ml_dtypes.bfloat16 array; uint16 bit patterns give uint16."""
        if type(x).__module__.startswith("torch"):
            import torch
            bits = self._ffn.forward_bits(x.detach().to(torch.bfloat16).contiguous(), stream)
            return torch.from_numpy(bits).view(torch.bfloat16)
        import numpy as np
        x = np.asarray(x)
        if x.dtype == np.uint16:
            return self._ffn.forward_bits(np.ascontiguousarray(x), stream)
        return from_bf16_bits(self._ffn.forward_bits(to_bf16_bits(x), stream))

    def forward_into(self, x: Buffer, m: int, out: Buffer, stream: int = 0) -> None:
        """y = FFN(x) from and into buffers of this layer's backend, bf16 [m, hidden_size] each;
        asynchronous on `stream` (backend.synchronize(stream) before reading `out`)."""
        self._ffn.forward_into(x, m, out, stream)

    def plan(self, m: int) -> list[dict]:
        """The launches a forward of m rows takes, in order (`metrale run`'s plan)."""
        return self._ffn.plan(m)

    def audit(self) -> list[dict]:
        """The audit rows this layer's build appended: one per kernel lookup."""
        return _json.loads(self._ffn.audit_json())
