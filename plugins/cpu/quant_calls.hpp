// SPDX-License-Identifier: MIT OR Apache-2.0
// The weight-quantized GEMM families of docs/kernels.md as data: what each family's weights are
// (code width, scale type, zero points, activation type, group size) and where each of its
// signatures keeps its arguments. One decoder per kernel shape (dense, grouped, repack) serves
// the validation, the baseline bodies and every SIMD tier.
//
// Internal linkage on purpose (see numeric.hpp): included by translation units compiled with
// different -m flags.
#pragma once

#include "kernels.hpp"

namespace metrale::cpu {
namespace {

enum class Family : uint8_t { w4a16, w4a16_zp, w8a16, fp8, w4a8, w8a8, fp8_a8, fp8_a8_group128, w4afp8, bf16, f16 };
// 4-bit integer, 8-bit integer, E4M3, and plain 16-bit floats (bf16, f16)
enum class Codes : uint8_t { w4, w8, fp8, bf16, f16 };

struct FamilyTraits {
  Codes codes;
  uint32_t code_bits;    // 4, 8 or 16
  uint32_t scale_bytes;  // 2 (f16) or 4 (f32); 0: no scales (the 16-bit float weights)
  bool zeros;            // a u8 zero point per group
  bool int8_act;         // activations int8 with a per-row f32 scale
  bool e4m3_act;         // activations E4M3 with f32 scales: per row, or per 128 columns (act_groups)
  bool act_groups;       // xscale f32 [rows][k/128] instead of [rows]
  uint32_t fixed_group;  // 128, or 0 when the `group` argument gives it
  uint32_t sym_zero;     // the implied zero point of a format without zeros (w4a16: 8), else 0
  // Argument positions: dense (x, xscale, codes, scales, zeros, y, m, n, k, group), grouped
  // (x, xscale, codes, scales, zeros, offsets, y, n, k, group, experts); -1 when absent.
  int dense[10];
  int grouped[11];
};

constexpr FamilyTraits kW4a16{Codes::w4, 4, 2, false, false, false, false, 128, 8,
                              {0, -1, 1, 2, -1, 3, 4, 5, 6, -1}, {0, -1, 1, 2, -1, 3, 4, 5, 6, -1, 7}};
constexpr FamilyTraits zero_point_bf16(Codes codes, uint32_t bits) {
  return {codes, bits, 4, true, false, false, false, 0, 0, {0, -1, 1, 2, 3, 4, 5, 6, 7, 8}, {0, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
}
constexpr FamilyTraits kFp8{Codes::fp8, 8, 4, false, false, false, false, 128, 0,
                            {0, -1, 1, 2, -1, 3, 4, 5, 6, -1}, {0, -1, 1, 2, -1, 3, 4, 5, 6, -1, 7}};
// fp8_gemm_a8[_group128] (xq, xscale, weight, scales, y, m, n, k) and the grouped form (xq,
// xscale, weight, scales, offsets, y, n, k, experts).
constexpr FamilyTraits fp8_e4m3_act(bool act_groups) {
  return {Codes::fp8, 8, 4, false, false, true, act_groups, 128, 0,
          {0, 1, 2, 3, -1, 4, 5, 6, 7, -1}, {0, 1, 2, 3, -1, 4, 5, 6, 7, -1, 8}};
}
constexpr FamilyTraits zero_point_int8(Codes codes, uint32_t bits) {
  return {codes, bits, 4, true, true, false, false, 0, 0, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}};
}
// w4afp8: 4-bit codes with zero points under E4M3 activations (per-row scales), the arguments of w4a8.
constexpr FamilyTraits kW4afp8{Codes::w4, 4, 4, true, false, true, false, 0, 0,
                               {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}};

// bf16 / f16 weights, the values themselves: (x, weight, y, m, n, k) and the grouped form (x,
// weight, offsets, y, n, k, experts). The fixed group of 128 only paces the accumulation.
constexpr FamilyTraits float16_weights(Codes codes) {
  return {codes, 16, 0, false, false, false, false, 128, 0,
          {0, -1, 1, -1, -1, 2, 3, 4, 5, -1}, {0, -1, 1, -1, -1, 2, 3, 4, 5, -1, 6}};
}

constexpr FamilyTraits traits(Family family) {
  switch (family) {
    case Family::w4a16: return kW4a16;
    case Family::w4a16_zp: return zero_point_bf16(Codes::w4, 4);
    case Family::w8a16: return zero_point_bf16(Codes::w8, 8);
    case Family::fp8: return kFp8;
    case Family::w4a8: return zero_point_int8(Codes::w4, 4);
    case Family::fp8_a8: return fp8_e4m3_act(false);
    case Family::fp8_a8_group128: return fp8_e4m3_act(true);
    case Family::w4afp8: return kW4afp8;
    case Family::bf16: return float16_weights(Codes::bf16);
    case Family::f16: return float16_weights(Codes::f16);
    case Family::w8a8: break;
  }
  return zero_point_int8(Codes::w8, 8);
}

// One matrix's tensors (or the start of a stack).
struct Weights {
  const uint8_t* codes;
  const uint8_t* scales;  // f16 or f32, per the family; null for bf16 / f16 weights
  const uint8_t* zeros;   // null for a family without zero points
};

// Per-matrix byte sizes of a family's tensors for [n, k] and group size `group`.
struct MatrixBytes {
  uint64_t codes, scales, zeros;
};
// Bytes of one activation row of k values, and the number of f32 scales a row carries.
inline uint64_t act_row_bytes(const FamilyTraits& f, uint64_t k) { return k * (f.int8_act || f.e4m3_act ? 1 : 2); }
inline uint64_t act_row_scales(const FamilyTraits& f, uint64_t k) {
  return f.act_groups ? k / 128 : (f.int8_act || f.e4m3_act ? 1 : 0);
}
inline MatrixBytes matrix_bytes(const FamilyTraits& f, uint64_t n, uint64_t k, uint64_t group) {
  const uint64_t groups = n * (k / group);
  return {n * k * f.code_bits / 8, groups * f.scale_bytes, f.zeros ? groups : 0};
}
inline Weights matrix_at(const FamilyTraits& f, const Weights& stack, uint64_t index, uint32_t n, uint32_t k,
                         uint32_t group) {
  const MatrixBytes b = matrix_bytes(f, n, k, group);
  return {stack.codes + index * b.codes, stack.scales ? stack.scales + index * b.scales : nullptr,
          stack.zeros ? stack.zeros + index * b.zeros : nullptr};
}

template <class T>
inline T* arg_or_null(const KernelArgs& args, int index) {
  return index < 0 ? nullptr : arg_ptr<T>(args, static_cast<unsigned>(index));
}

// <family>_gemv / <family>_gemm: rows [0, m) of x times the [n, k] matrix.
struct DenseCall {
  const void* x;         // bf16, or int8 / E4M3 codes for the 8-bit activation families
  const float* xscale;   // per row (or per row and 128 columns); null for bf16 activations
  Weights w;
  uint16_t* y;
  uint32_t m, n, k, group;
};
inline DenseCall dense_call(const KernelArgs& a, const FamilyTraits& f) {
  const int* i = f.dense;
  return {arg_ptr<const void>(a, i[0]), arg_or_null<const float>(a, i[1]),
          {arg_ptr<const uint8_t>(a, i[2]), arg_or_null<const uint8_t>(a, i[3]), arg_or_null<const uint8_t>(a, i[4])},
          arg_ptr<uint16_t>(a, i[5]), arg_u32(a, i[6]), arg_u32(a, i[7]), arg_u32(a, i[8]),
          f.fixed_group ? f.fixed_group : arg_u32(a, i[9])};
}

// <family>_grouped_gemm: expert e's rows [offsets[e], offsets[e + 1]) times stacked matrix e.
struct GroupedQCall {
  const void* x;
  const float* xscale;
  Weights w;  // the stack
  const int32_t* offsets;
  uint16_t* y;
  uint32_t n, k, group, experts;
};
inline GroupedQCall grouped_qcall(const KernelArgs& a, const FamilyTraits& f) {
  const int* i = f.grouped;
  return {arg_ptr<const void>(a, i[0]), arg_or_null<const float>(a, i[1]),
          {arg_ptr<const uint8_t>(a, i[2]), arg_or_null<const uint8_t>(a, i[3]), arg_or_null<const uint8_t>(a, i[4])},
          arg_ptr<const int32_t>(a, i[5]), arg_ptr<uint16_t>(a, i[6]), arg_u32(a, i[7]), arg_u32(a, i[8]),
          f.fixed_group ? f.fixed_group : arg_u32(a, i[9]), arg_u32(a, i[10])};
}

// fp8_grouped_gemv (x, weight, scales, offsets, active, y, n, k, slots): block row `by` serves
// expert active[1 + by] when by < active[0].
struct ActiveCall {
  GroupedQCall g;  // experts unused
  const int32_t* active;
};
inline ActiveCall active_call(const KernelArgs& a) {
  return {{arg_ptr<const void>(a, 0), nullptr, {arg_ptr<const uint8_t>(a, 1), arg_ptr<const uint8_t>(a, 2), nullptr},
           arg_ptr<const int32_t>(a, 3), arg_ptr<uint16_t>(a, 5), arg_u32(a, 6), arg_u32(a, 7), 128, 0},
          arg_ptr<const int32_t>(a, 4)};
}

// <family>_repack: (codes_in[, scales_in[, zeros_in]], codes_out[, scales_out[, zeros_out]], n,
// k[, group], count).
struct QRepackCall {
  Weights in;
  uint8_t *codes_out, *scales_out, *zeros_out;
  uint32_t n, k, group, count;
};
inline QRepackCall qrepack_call(const KernelArgs& a, const FamilyTraits& f) {
  if (f.scale_bytes == 0)
    return {{arg_ptr<const uint8_t>(a, 0), nullptr, nullptr}, arg_ptr<uint8_t>(a, 1), nullptr, nullptr,
            arg_u32(a, 2), arg_u32(a, 3), f.fixed_group, arg_u32(a, 4)};
  if (!f.zeros)
    return {{arg_ptr<const uint8_t>(a, 0), arg_ptr<const uint8_t>(a, 1), nullptr},
            arg_ptr<uint8_t>(a, 2), arg_ptr<uint8_t>(a, 3), nullptr, arg_u32(a, 4), arg_u32(a, 5), f.fixed_group,
            arg_u32(a, 6)};
  return {{arg_ptr<const uint8_t>(a, 0), arg_ptr<const uint8_t>(a, 1), arg_ptr<const uint8_t>(a, 2)},
          arg_ptr<uint8_t>(a, 3), arg_ptr<uint8_t>(a, 4), arg_ptr<uint8_t>(a, 5), arg_u32(a, 6), arg_u32(a, 7),
          arg_u32(a, 8), arg_u32(a, 9)};
}

}  // namespace
}  // namespace metrale::cpu
