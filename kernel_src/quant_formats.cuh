// SPDX-License-Identifier: MIT OR Apache-2.0
// The quantized weight formats of docs/kernels.md as the kernels read them, one policy each:
// code width, scale type, group size, zero points, and the value of a code. The GEMV and tile
// bodies are written once against these policies.
//   W4Sym  w4a16-nk-g128: 4-bit, value (q - 8) · f16 scale, groups of 128
//   W4Zp   w4-zp:         4-bit, value (q - z) · f32 scale, groups of G, u8 zero points
//   W8Zp   w8-zp:         8-bit, value (q - z) · f32 scale, groups of G, u8 zero points
//   Fp8W   fp8-e4m3:      8-bit E4M3, value e4m3(q) · f32 scale, groups of 128
//   W4ZpE4m3 w4-zp read by the E4M3 tensor cores (module w4afp8): the codes 0..15 as E4M3
//   Bf16W  bf16-nk:       16-bit, the bf16 value itself, no scales (module bf16)
//   F16W   f16-nk:        16-bit, the f16 value itself, no scales (module f16)
// kFp8: the codes are E4M3; kE4m3Mma: the tiles multiply on the E4M3 tensor cores; kScaled:
// values carry scales per group; kBf16Parts: bf16 numbers whose sum is a value, exactly.
#pragma once

#include "metrale_common.cuh"

namespace metrale {

// Every quantized format: scaled codes, each value (q - z or E4M3) one bf16 number.
struct ScaledCodes {
  static constexpr bool kScaled = true;
  static constexpr unsigned kBf16Parts = 1;
};

struct W4Sym : ScaledCodes {
  static constexpr unsigned kBits = 4;
  static constexpr unsigned kFixedGroup = 128;
  static constexpr bool kZeros = false;
  static constexpr int kZero = 8;
  static constexpr bool kFp8 = false;
  static constexpr bool kE4m3Mma = false;
  using Scale = __half;
  __device__ static float scale(Scale s) { return __half2float(s); }
};

struct W4Zp : ScaledCodes {
  static constexpr unsigned kBits = 4;
  static constexpr unsigned kFixedGroup = 0;  // the launch's `group` (32, 64 or 128)
  static constexpr bool kZeros = true;
  static constexpr int kZero = 0;
  static constexpr bool kFp8 = false;
  static constexpr bool kE4m3Mma = false;
  using Scale = float;
  __device__ static float scale(Scale s) { return s; }
};

struct W8Zp : ScaledCodes {
  static constexpr unsigned kBits = 8;
  static constexpr unsigned kFixedGroup = 0;
  static constexpr bool kZeros = true;
  static constexpr int kZero = 0;
  static constexpr bool kFp8 = false;
  static constexpr bool kE4m3Mma = false;
  using Scale = float;
  __device__ static float scale(Scale s) { return s; }
};

struct Fp8W : ScaledCodes {
  static constexpr unsigned kBits = 8;
  static constexpr unsigned kFixedGroup = 128;
  static constexpr bool kZeros = false;
  static constexpr int kZero = 0;
  static constexpr bool kFp8 = true;
  static constexpr bool kE4m3Mma = true;
  using Scale = float;
  __device__ static float scale(Scale s) { return s; }
};

// w4-zp under E4M3 activations: each code q (0..15, an E4M3 number exactly) enters the E4M3
// tensor cores as itself; the zero point joins through the activations' row sums.
struct W4ZpE4m3 : W4Zp {
  static constexpr bool kE4m3Mma = true;
};

// Plain 16-bit weights: each code is the value itself; no scales, no zero points, no groups
// (kFixedGroup only keeps the group arithmetic defined).
struct Plain16 {
  static constexpr unsigned kBits = 16;
  static constexpr unsigned kFixedGroup = 128;
  static constexpr bool kZeros = false;
  static constexpr int kZero = 0;
  static constexpr bool kFp8 = false;
  static constexpr bool kE4m3Mma = false;
  static constexpr bool kScaled = false;
  using Scale = float;
};

struct Bf16W : Plain16 {
  static constexpr unsigned kBf16Parts = 1;
  __device__ static float value(unsigned bits) { return __uint_as_float(bits << 16); }
};

// An f16 value w is bf16(w) + (w - bf16(w)) exactly: w has 11 significant bits, bf16(w) keeps
// the top 8 and the rest (at most 4 units of w's last place) fits in bf16 too.
struct F16W : Plain16 {
  static constexpr unsigned kBf16Parts = 2;
  __device__ static float value(unsigned bits) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
};

// The value of code q (already extracted) given zf = code_offset(zero point): exact in f32 and
// in bf16 (|q - z| <= 255; every E4M3 number is a bf16 number), or the plain 16-bit value.
template <class Fmt>
__device__ __forceinline__ float code_value(unsigned q, float zf) {
  if constexpr (Fmt::kBits == 16) {
    return Fmt::value(q);
  } else if constexpr (Fmt::kFp8) {
    return e4m3_to_f32(q);
  } else {
    return code_minus(q, zf);
  }
}

// Code i (0-based, lowest bits first) of a 32-bit word of codes.
template <class Fmt>
__device__ __forceinline__ unsigned code_at(unsigned word, unsigned i) {
  return (word >> (i * Fmt::kBits)) & ((1u << Fmt::kBits) - 1u);
}

// One matrix [N][K] (or, before expert(), a stack of them) in its family's canonical layout.
template <class Fmt>
struct QuantWeights {
  const unsigned* codes;            // rows of K·bits/32 words
  const typename Fmt::Scale* scales;  // [N][K/G]
  const unsigned char* zeros;       // [N][K/G]; formats with zero points only
  unsigned n, k, group;

  // log2 of the group size: groups are 32, 64 or 128 (powers of two), so positions map to groups
  // by a shift, not a division.
  __device__ unsigned group_shift() const { return Fmt::kFixedGroup == 128 ? 7 : __ffs(static_cast<int>(group)) - 1; }
  __device__ unsigned group_of(unsigned kpos) const { return kpos >> group_shift(); }
  // True when K position kpos starts a group.
  __device__ bool group_starts(unsigned kpos) const { return (kpos & ((1u << group_shift()) - 1u)) == 0; }
  __device__ unsigned groups() const { return k >> group_shift(); }
  __device__ unsigned row_words() const { return k * Fmt::kBits / 32; }
  __device__ const unsigned* row_codes(unsigned row) const { return codes + static_cast<size_t>(row) * row_words(); }
  __device__ float scale(unsigned row, unsigned g) const {
    if constexpr (Fmt::kScaled) {
      return Fmt::scale(scales[static_cast<size_t>(row) * groups() + g]);
    } else {
      return 1.f;
    }
  }
  __device__ int zero(unsigned row, unsigned g) const {
    if constexpr (Fmt::kZeros) {
      return zeros[static_cast<size_t>(row) * groups() + g];
    } else {
      return Fmt::kZero;
    }
  }
  // Matrix e of a stack, each tensor at e times its per-matrix size.
  __device__ QuantWeights expert(unsigned e) const {
    const size_t cells = static_cast<size_t>(e) * n * groups();
    return {codes + static_cast<size_t>(e) * n * row_words(), Fmt::kScaled ? scales + cells : scales,
            Fmt::kZeros ? zeros + cells : zeros, n, k, group};
  }
};

}  // namespace metrale
