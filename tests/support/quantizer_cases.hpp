// SPDX-License-Identifier: MIT OR Apache-2.0
// Two rows of k = 256 bf16 values and what each activation quantizer of docs/kernels.md writes
// for them, worked out from the formulas with numpy (independently of any backend's code): in f32
// (metrale's contract, transformers' block-FP8 quantizer) and in torch's bf16 arithmetic
// (compressed-tensors: scale max / 127.5 or / 448 rounded to bf16, quotient rounded to bf16). The
// rows hold values whose codes differ between the two: -0.777 and 0.9961 (row 0), 5.0 (row 1) in
// int8. Every backend's tests launch each quantizer on them.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace quantizer_cases {

inline constexpr uint32_t kRows = 2, kCols = 256;

// The rows as doubles (each exactly a bf16 value once rounded): row-major [2][256].
inline std::vector<double> rows() {
  std::vector<double> x(size_t{kRows} * kCols, 0.0);
  const double row0[] = {1.0, -1.0, 0.5, -0.5, 0.25, 0.3, 0.123, -0.777, 0.0039, 0.9961};
  for (size_t i = 0; i < std::size(row0); ++i) x[i] = row0[i];
  x[kCols + 0] = 0.3, x[kCols + 1] = 1.0, x[kCols + 128] = 5.0, x[kCols + 129] = -8.0, x[kCols + 130] = 0.77;
  return x;
}

struct Case {
  const char* kernel;
  std::vector<float> scales;                   // [2][k / width]
  std::vector<std::array<uint32_t, 3>> codes;  // (row, column, byte) of every non-zero code
  // The whole [2][256] byte matrix the quantizer writes.
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out(size_t{kRows} * kCols, 0);
    for (const auto& [r, col, byte] : codes) out[size_t{r} * kCols + col] = static_cast<uint8_t>(byte);
    return out;
  }
};

inline std::vector<Case> cases() {
  using Codes = std::vector<std::array<uint32_t, 3>>;
  const auto with = [](Codes a, const Codes& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const Codes fp8_row0 = {{0, 0, 126}, {0, 1, 254}, {0, 2, 118}, {0, 3, 246}, {0, 4, 110},
                          {0, 5, 112}, {0, 6, 102}, {0, 7, 251}, {0, 8, 62}, {0, 9, 126}};
  const Codes fp8_row1 = {{1, 0, 88}, {1, 1, 102}, {1, 128, 121}, {1, 129, 254}, {1, 130, 99}};
  const Codes fp8_row1_groups = {{1, 0, 112}, {1, 1, 126}, {1, 128, 121}, {1, 129, 254}, {1, 130, 99}};
  return {
      {"quantize_int8", {0x1.020408p-7f, 0x1.020408p-4f},
       {{0, 0, 127}, {0, 1, 129}, {0, 2, 64}, {0, 3, 192}, {0, 4, 32}, {0, 5, 38}, {0, 6, 16}, {0, 7, 157}, {0, 9, 127},
        {1, 0, 5}, {1, 1, 16}, {1, 128, 79}, {1, 129, 129}, {1, 130, 12}}},
      {"quantize_int8_bf16", {0x1.02p-7f, 0x1.02p-4f},
       {{0, 0, 127}, {0, 1, 129}, {0, 2, 64}, {0, 3, 192}, {0, 4, 32}, {0, 5, 38}, {0, 6, 16}, {0, 7, 158}, {0, 9, 126},
        {1, 0, 5}, {1, 1, 16}, {1, 128, 80}, {1, 129, 129}, {1, 130, 12}}},
      {"quantize_fp8", {0x1.24924ap-9f, 0x1.24924ap-6f}, with(fp8_row0, fp8_row1)},
      {"quantize_fp8_bf16", {0x1.24p-9f, 0x1.24p-6f}, with(fp8_row0, fp8_row1)},
      // Per 128 columns: row 0's second group is all zeros (scale 0, or at least 2^-23 in bf16).
      {"quantize_fp8_group128", {0x1.24924ap-9f, 0.0f, 0x1.24924ap-9f, 0x1.24924ap-6f}, with(fp8_row0, fp8_row1_groups)},
      {"quantize_fp8_group128_bf16", {0x1.24p-9f, 0x1p-23f, 0x1.24p-9f, 0x1.24p-6f}, with(fp8_row0, fp8_row1_groups)},
  };
}

// The static quantizers (quantize_*_static_bf16) with each row's stored scale equal to the scale
// the dynamic bf16 quantizer computes for it write the same codes: one group per row, scales
// {row 0's, row 1's}, and `dynamic` names the case above whose bytes they must equal.
struct StaticCase {
  const char* kernel;
  const char* dynamic;
  std::vector<float> scales;  // [groups]: one per row here
};
inline std::vector<StaticCase> static_cases() {
  return {{"quantize_int8_static_bf16", "quantize_int8_bf16", {0x1.02p-7f, 0x1.02p-4f}},
          {"quantize_fp8_static_bf16", "quantize_fp8_bf16", {0x1.24p-9f, 0x1.24p-6f}}};
}
// A stored scale smaller than the row needs saturates: row 0 under 0x1.02p-8 puts 1.0 at code 127
// (0x7f) and -1.0 at -128 (0x80), the int8 range compressed-tensors clamps to.
inline constexpr float kSaturatingScale = 0x1.02p-8f;

}  // namespace quantizer_cases
