// SPDX-License-Identifier: MIT OR Apache-2.0
// The CPU backend's own weight layouts ("cpu-native", "cpu-native-w4zp", "cpu-native-w8",
// "cpu-native-fp8" in cpu.json): 16-column panels, written once at load by the family's repack
// and read by every GEMM of the SIMD tiers.
//
// Same byte sizes and matrix offsets as the canonical layouts of docs/kernels.md. Weight rows
// (output columns) are grouped in panels of 16; panel P holds rows [16P, 16P + w),
// w = min(16, n - 16P), and each of its tensors starts where row 16P starts canonically:
//   codes : one 64-byte unit (w u32 lanes) per block of K: lane c is row 16P + c's canonical
//           word of that block. 4-bit codes (8 k per word) are reordered inside the word: the
//           even k (k = 8kb + 2r) in bits 4r..4r+3 of the low 16 bits, the odd ones
//           (8kb + 2r + 1) in the same bits of the high 16. 8-bit codes (4 k per word: FP8 and
//           integer) and 16-bit floats (bf16, f16: 2 k per word) keep their canonical order.
//   scales, zeros: for each group g, w values (one per row), in the canonical type (none for
//           bf16 / f16 weights).
// FP8 only: a group holding a NaN code (0x7f, 0xff) gets a NaN scale, so that the SIMD decoders
// need not produce NaN themselves (the product of the group with its scale is NaN either way).
// Why: one 64-byte load is a k-block of 16 columns (columns along the vector lanes, the
// outer-product form: the group scale is one vector op per group, no horizontal sums). The
// even/odd split lets one shift and one mask per r produce the (k, k + 1) pairs `vdpbf16ps`
// takes, the f32 values an FMA takes, or the bytes an int8 dot product takes; a word of 8-bit
// codes is already the four bytes `vpdpbusd` takes.
//
// Internal linkage on purpose, as numeric.hpp: each tier's TU compiles its own copy.
#pragma once

#include "kernels.hpp"
#include "numeric.hpp"
#include "quant_calls.hpp"

namespace metrale::cpu {
namespace {

constexpr uint32_t kPanel = 16;  // columns per panel

// Where panel `panel` of a matrix starts, and its width.
struct PanelRef {
  const uint8_t* codes;   // unit kb at codes + kb * width * 4
  const uint8_t* scales;  // group g at scales + g * width * scale_bytes
  const uint8_t* zeros;   // group g at zeros + g * width; null without zero points
  uint32_t width;
  // Where the codes end, and what a prefetch that runs past the end adds to its address (0: it
  // reads on into the next panel in memory; see PanelKernels::block).
  const uint8_t* codes_end;
  ptrdiff_t beyond;
};
inline PanelRef panel_ref(const FamilyTraits& f, const Weights& w, uint32_t n, uint32_t k, uint32_t group,
                          uint32_t panel) {
  const size_t row = size_t{panel} * kPanel;
  const size_t groups = k / group;
  const uint32_t width = min_u32(kPanel, n - static_cast<uint32_t>(row));
  const uint8_t* codes = w.codes + row * (size_t{k} * f.code_bits / 8);
  return {codes, w.scales ? w.scales + row * groups * f.scale_bytes : nullptr, w.zeros ? w.zeros + row * groups : nullptr,
          width, codes + size_t{width} * k * f.code_bits / 8, 0};
}

// Canonical word of codes k = 8kb .. 8kb + 7 -> panel lane: even codes in the low 16 bits, odd
// codes in the high 16, each in k order.
inline uint32_t split_even_odd(uint32_t word) {
  auto pack = [](uint32_t nibbles_in_bytes) {  // nibble in the low half of each byte -> 16 bits
    const uint32_t v = (nibbles_in_bytes | (nibbles_in_bytes >> 4)) & 0x00ff00ffu;
    return (v | (v >> 8)) & 0x0000ffffu;
  };
  return pack(word & 0x0f0f0f0fu) | (pack((word >> 4) & 0x0f0f0f0fu) << 16);
}

// Values of `bytes` bytes each: row-major [width][per_row] -> [per_row][width].
inline void transpose_rows(const uint8_t* in, uint8_t* out, uint32_t width, size_t per_row, uint32_t bytes) {
  for (uint32_t col = 0; col < width; ++col)
    for (size_t g = 0; g < per_row; ++g)
      __builtin_memcpy(out + (g * width + col) * bytes, in + (col * per_row + g) * bytes, bytes);
}

// An FP8 group with a NaN code: its scale becomes NaN (see the header comment).
inline void mark_nan_groups(const uint8_t* codes_row, float* scales_panel, uint32_t col, uint32_t width,
                            uint32_t k) {
  for (uint32_t g = 0; g < k / kGroup; ++g) {
    bool nan = false;
    for (uint32_t t = 0; t < kGroup; ++t) nan |= (codes_row[g * kGroup + t] & 0x7f) == 0x7f;
    if (nan) scales_panel[size_t{g} * width + col] = __builtin_nanf("");
  }
}

// The repack of every family: block bx converts rows [64bx, 64bx + 64) of matrix `by` (four
// panels) from the canonical layout.
template <Family kFamily>
void panel_repack(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char*) {
  constexpr FamilyTraits f = traits(kFamily);
  const QRepackCall c = qrepack_call(args, f);
  const uint32_t r0 = bx * kRepackRows;
  if (r0 >= c.n || by >= c.count) return;
  const MatrixBytes bytes = matrix_bytes(f, c.n, c.k, c.group);
  const size_t words = size_t{c.k} * f.code_bits / 32, groups = c.k / c.group;
  const auto* qin = reinterpret_cast<const uint32_t*>(c.in.codes + by * bytes.codes);
  auto* qout = reinterpret_cast<uint32_t*>(c.codes_out + by * bytes.codes);
  [[maybe_unused]] const uint8_t* sin = c.in.scales ? c.in.scales + by * bytes.scales : nullptr;
  [[maybe_unused]] uint8_t* sout = c.scales_out ? c.scales_out + by * bytes.scales : nullptr;
  static_assert(kRepackRows % kPanel == 0);
  for (uint32_t row = r0; row < min_u32(c.n, r0 + kRepackRows); row += kPanel) {
    const uint32_t width = min_u32(kPanel, c.n - row);
    for (uint32_t col = 0; col < width; ++col)
      for (size_t kb = 0; kb < words; ++kb) {
        const uint32_t word = qin[(row + col) * words + kb];
        qout[row * words + kb * width + col] = f.codes == Codes::w4 ? split_even_odd(word) : word;
      }
    const size_t at = row * groups;
    if constexpr (f.scale_bytes != 0)
      transpose_rows(sin + at * f.scale_bytes, sout + at * f.scale_bytes, width, groups, f.scale_bytes);
    if constexpr (f.zeros)
      transpose_rows(c.in.zeros + by * bytes.zeros + at, c.zeros_out + by * bytes.zeros + at, width, groups, 1);
    if constexpr (f.codes == Codes::fp8)
      for (uint32_t col = 0; col < width; ++col)
        mark_nan_groups(reinterpret_cast<const uint8_t*>(qin + (row + col) * words),
                        reinterpret_cast<float*>(sout + at * f.scale_bytes), col, width, c.k);
  }
}

}  // namespace
}  // namespace metrale::cpu
