# SPDX-License-Identifier: MIT OR Apache-2.0
"""Number formats in float64 numpy: bf16 (activations, outputs), fp16, and FP8 E4M3 ("e4m3fn").

Every narrowing rounds to nearest, ties to even, in one step from the float64 value (no double
rounding through f32), as the kernels' contract and the tools' torch casts do.
"""
import numpy as np


def _round_to_bits(x: np.ndarray, mantissa_bits: int, min_exponent: int) -> np.ndarray:
    """x rounded to a binary float with `mantissa_bits` fraction bits whose smallest normal
    exponent is `min_exponent` (below it, subnormal spacing 2^(min_exponent - mantissa_bits))."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    finite = np.isfinite(x) & (x != 0)
    _, e = np.frexp(np.where(finite, x, 1.0))  # x = m * 2^e, 0.5 <= |m| < 1
    ulp_exp = np.maximum(e - 1 - mantissa_bits, min_exponent - mantissa_bits)
    scaled = np.ldexp(np.where(finite, x, 0.0), -ulp_exp)
    out = np.where(finite, np.ldexp(np.rint(scaled), ulp_exp), x)  # np.rint: ties to even
    return out


BF16_MAX = float(np.ldexp(255.0, 120))  # 0x7f7f


def round_bf16(x) -> np.ndarray:
    r = _round_to_bits(x, 7, -126)
    # Past the largest finite bf16 the value rounds to infinity.
    return np.where(np.abs(r) > BF16_MAX, np.copysign(np.inf, r), r)


def bf16_bits(x) -> np.ndarray:
    """bf16 bit patterns (uint16) of float64 values, rounded once."""
    r = round_bf16(x).astype(np.float32)
    return (r.view(np.uint32) >> 16).astype(np.uint16)


def bf16_value(bits) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def f32_to_bf16_bits(x) -> np.ndarray:
    """bf16 bits of float32 values (what `metrale run --input` does to an F32 tensor)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_ulp(x) -> np.ndarray:
    """One unit in the last place of a bf16 of this magnitude (as layers/core/numeric.cpp)."""
    a = np.abs(np.asarray(x, dtype=np.float64))
    _, e = np.frexp(np.where(a > 0, a, 1.0))
    return np.where(a < 2.0 ** -126, 2.0 ** -133, np.ldexp(1.0, e - 1 - 7))


def f16_value(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)


# FP8 E4M3 as torch.float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits, subnormals,
# no infinities; S.1111.111 (0x7f, 0xff) is NaN, so the largest finite value is 0x7e = 448.
def _e4m3_table() -> np.ndarray:
    table = np.empty(256, dtype=np.float64)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exp = (code >> 3) & 0xF
        man = code & 0x7
        if exp == 0xF and man == 0x7:
            table[code] = np.nan
        elif exp == 0:
            table[code] = sign * man * 2.0 ** -9
        else:
            table[code] = sign * (1 + man / 8) * 2.0 ** (exp - 7)
    return table


E4M3_TABLE = _e4m3_table()
E4M3_MAX = 448.0


def e4m3_value(codes) -> np.ndarray:
    return E4M3_TABLE[np.asarray(codes, dtype=np.uint8)]


def e4m3_codes(x) -> np.ndarray:
    """FP8 E4M3 codes of float64 values, saturated to +-448 first (the tools clamp before the
    cast) and rounded to nearest, ties to even."""
    x = np.clip(np.asarray(x, dtype=np.float64), -E4M3_MAX, E4M3_MAX)
    r = _round_to_bits(x, 3, -6)
    positive = E4M3_TABLE[:0x7F]  # codes 0x00..0x7e, increasing
    codes = np.searchsorted(positive, np.abs(r)).astype(np.uint8)
    if not np.array_equal(positive[codes], np.abs(r)):
        raise AssertionError("e4m3 rounding produced a value outside the format")
    return np.where(np.signbit(r) & (r != 0), codes | 0x80, codes).astype(np.uint8)
