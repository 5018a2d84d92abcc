# SPDX-License-Identifier: MIT OR Apache-2.0
"""bf16 on numpy: ml_dtypes.bfloat16 arrays and their uint16 bit patterns (what the runtime takes).
numpy and ml_dtypes are imported when first needed, so that importing metrale stays quick."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


def to_bf16_bits(x) -> np.ndarray:
    """The bf16 bit patterns of x, C-contiguous uint16: ml_dtypes.bfloat16 viewed (no copy),
    other floating values rounded to nearest even (as `metrale run` rounds F32 input)."""
    import ml_dtypes
    import numpy as np
    x = np.asarray(x)
    if x.dtype == ml_dtypes.bfloat16:
        return np.ascontiguousarray(x).view(np.uint16)
    if x.dtype == np.uint16:
        return np.ascontiguousarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"bf16 rows from {x.dtype}: give floating values, ml_dtypes.bfloat16 or uint16 bit patterns")
    return np.ascontiguousarray(x.astype(ml_dtypes.bfloat16)).view(np.uint16)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """uint16 bit patterns as an ml_dtypes.bfloat16 array (a view, no copy)."""
    import ml_dtypes
    return bits.view(ml_dtypes.bfloat16)
