// SPDX-License-Identifier: MIT OR Apache-2.0
// The CPU backend's own W4A16 weight layout ("cpu-native" in cpu.json): 16-column panels, written
// once at load by w4a16_repack and read by every W4A16 kernel of the SIMD tiers.
//
// Same byte sizes and matrix offsets as the canonical layout of docs/kernels.md. Weight rows
// (output columns) are grouped in panels of 16; panel P holds rows [16P, 16P + w),
// w = min(16, n - 16P), and starts where row 16P starts canonically:
//   codes : byte 16P * k/2; for each 8-wide block kb of K, one unit of w u32 lanes. Lane c holds
//           row 16P + c's codes k = 8kb .. 8kb + 7: the even ones (k = 8kb + 2r) in bits 4r..4r+3
//           of the low 16 bits, the odd ones (8kb + 2r + 1) in the same bits of the high 16.
//   scales: half 16P * k/128; for each group g, w f16 values (one per row).
// Why: one 64-byte load is a k-block of 16 columns (columns along the vector lanes, the
// outer-product form: the group scale is one vector op per group, no horizontal sums), and the
// even/odd split lets one shift and one mask per r produce the (k, k + 1) pairs `vdpbf16ps`
// takes, or per k the f32 values an FMA takes.
//
// Internal linkage on purpose, as numeric.hpp: each tier's TU compiles its own copy.
#pragma once

#include "kernels.hpp"
#include "numeric.hpp"

namespace metrale::cpu {
namespace {

constexpr uint32_t kPanel = 16;                  // columns per panel
constexpr uint32_t kUnitsPerGroup = kGroup / 8;  // 8-wide k blocks per group

// Where panel `panel` of a matrix starts, and its width.
struct PanelRef {
  const uint8_t* codes;    // unit kb at codes + kb * width * 4
  const uint16_t* scales;  // group g at scales + g * width
  uint32_t width;
};
inline PanelRef panel_ref(const uint8_t* codes, const uint16_t* scales, uint32_t n, uint32_t k,
                          uint32_t panel) {
  const uint32_t row = panel * kPanel;
  return {codes + static_cast<size_t>(row) * (k / 2), scales + static_cast<size_t>(row) * (k / kGroup),
          min_u32(kPanel, n - row)};
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

// w4a16_repack: block bx converts rows [64bx, 64bx + 64) of matrix `by` (four panels) from the
// canonical layout.
inline void panel_repack(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char*) {
  const RepackCall c = repack_call(args);
  const uint32_t r0 = bx * kRepackRows;
  if (r0 >= c.n || by >= c.count) return;
  const size_t words = c.k / 8, groups = c.k / kGroup;
  const uint32_t* qin = c.qweight_in + by * (c.n * words);
  uint32_t* qout = c.qweight_out + by * (c.n * words);
  const uint16_t* sin = c.scales_in + by * (c.n * groups);
  uint16_t* sout = c.scales_out + by * (c.n * groups);
  static_assert(kRepackRows % kPanel == 0);
  for (uint32_t row = r0; row < min_u32(c.n, r0 + kRepackRows); row += kPanel) {
    const uint32_t width = min_u32(kPanel, c.n - row);
    uint32_t* q = qout + row * words;
    uint16_t* s = sout + row * groups;
    for (uint32_t col = 0; col < width; ++col) {
      const uint32_t* src = qin + (row + col) * words;
      for (size_t kb = 0; kb < words; ++kb) q[kb * width + col] = split_even_odd(src[kb]);
      const uint16_t* ss = sin + (row + col) * groups;
      for (size_t g = 0; g < groups; ++g) s[g * width + col] = ss[g];
    }
  }
}

}  // namespace
}  // namespace metrale::cpu
