// SPDX-License-Identifier: MIT OR Apache-2.0
// Baseline (portable scalar) bodies of the quantized weight families of docs/kernels.md
// (w4a16_zp, w8a16, fp8, w4a8, w8a8) and of the quant module, on the canonical layouts; the
// baseline tier's repacks are copies. Arguments were validated by the launch path
// (quant_checks.cpp): sizes fit their allocations, K is a multiple of 128, the group size is
// 32, 64 or 128, offsets, active and perm are in range.
#include "kernels.hpp"
#include "numeric.hpp"
#include "quant_calls.hpp"
#include "quant_rule.hpp"

#include <cmath>
#include <cstring>

namespace metrale::cpu::baseline {
namespace {

// The codes of one group of one weight row, as integers (E4M3: the byte; bf16 / f16: the bits).
template <Codes C>
void group_codes(const uint8_t* row, uint32_t first, uint32_t count, int32_t* out) {
  for (uint32_t t = 0; t < count; ++t) {
    const uint32_t k = first + t;
    if constexpr (C == Codes::bf16 || C == Codes::f16) {
      uint16_t bits;
      std::memcpy(&bits, row + 2 * size_t{k}, 2);
      out[t] = bits;
    } else {
      out[t] = C == Codes::w4 ? (row[k / 2] >> (4 * (k % 2))) & 0xf : row[k];
    }
  }
}

// Weight value of code q (zero point z applies to the integer codes only).
template <Codes C>
float weight_value(int32_t q, int32_t z) {
  if constexpr (C == Codes::fp8) return e4m3_to_f32(static_cast<uint8_t>(q));
  if constexpr (C == Codes::bf16) return bf16_to_f32(static_cast<uint16_t>(q));
  if constexpr (C == Codes::f16) return f16_to_f32(static_cast<uint16_t>(q));
  return static_cast<float>(q - z);
}

// One tile: rows [0, mt) of x (row stride k) times weight rows [n0, n0 + nt) into y (row stride
// n). Per row and group: the group's dot product on the codes (exact in int32 for int8
// activations, f32 otherwise) minus the zero point's share, times the group scale, summed in
// f32; int8 results times the row's scale. Scratch: accumulators f32 [kTileM][kTileN].
template <Family kFamily>
void tile(const void* x, const float* xscale, uint32_t mt, const Weights& w, uint32_t n, uint32_t k, uint32_t group,
          uint32_t n0, uint32_t nt, uint16_t* y, unsigned char* scratch) {
  constexpr FamilyTraits f = traits(kFamily);
  float* acc = scratch_at<float>(scratch, 0);
  for (uint32_t i = 0; i < mt * kTileN; ++i) acc[i] = 0.0f;
  const uint32_t groups = k / group;
  int32_t q[kGroup];
  for (uint32_t c = 0; c < nt; ++c) {
    const size_t row = n0 + c;
    const uint8_t* codes = w.codes + row * (size_t{k} * f.code_bits / 8);
    for (uint32_t g = 0; g < groups; ++g) {
      group_codes<f.codes>(codes, g * group, group, q);
      float s = 1.0f;  // bf16 / f16 weights have no scales
      if constexpr (f.scale_bytes != 0) std::memcpy(&s, w.scales + (row * groups + g) * 4, 4);
      const int32_t z = f.zeros ? w.zeros[row * groups + g] : 0;
      for (uint32_t i = 0; i < mt; ++i) {
        if constexpr (f.int8_act) {
          const int8_t* xr = static_cast<const int8_t*>(x) + size_t{i} * k + g * group;
          int32_t dot = 0, sum = 0;
          for (uint32_t t = 0; t < group; ++t) {
            dot += xr[t] * q[t];
            sum += xr[t];
          }
          acc[i * kTileN + c] += s * static_cast<float>(dot - z * sum);
        } else {
          const size_t first = size_t{i} * k + g * group;
          float dot = 0.0f;  // each product is exact in f32
          for (uint32_t t = 0; t < group; ++t) {
            const float wv = weight_value<f.codes>(q[t], z);
            const float xv = f.e4m3_act ? e4m3_to_f32(static_cast<const uint8_t*>(x)[first + t])
                                        : bf16_to_f32(static_cast<const uint16_t*>(x)[first + t]);
            dot += xv * wv;
          }
          // Scales per 128 columns of the activations join the weights' group scale.
          acc[i * kTileN + c] += dot * (f.act_groups ? s * xscale[size_t{i} * groups + g] : s);
        }
      }
    }
  }
  for (uint32_t i = 0; i < mt; ++i)
    for (uint32_t c = 0; c < nt; ++c) {
      const float v = acc[i * kTileN + c];
      y[size_t{i} * n + n0 + c] = f32_to_bf16(xscale && !f.act_groups ? v * xscale[i] : v);
    }
}


template <Family kFamily>
void gemv(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char* scratch) {
  const DenseCall c = dense_call(args, traits(kFamily));
  const uint32_t n0 = bx * kGemvRows;
  if (n0 >= c.n) return;
  tile<kFamily>(c.x, c.xscale, c.m, c.w, c.n, c.k, c.group, n0, min_u32(kGemvRows, c.n - n0), c.y, scratch);
}

template <Family kFamily>
void gemm(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  const DenseCall c = dense_call(args, traits(kFamily));
  const uint32_t n0 = bx * kTileN, m0 = by * kTileM;
  if (n0 >= c.n || m0 >= c.m) return;
  constexpr FamilyTraits f = traits(kFamily);
  tile<kFamily>(static_cast<const uint8_t*>(c.x) + m0 * act_row_bytes(f, c.k),
                c.xscale ? c.xscale + m0 * act_row_scales(f, c.k) : nullptr, min_u32(kTileM, c.m - m0), c.w, c.n, c.k, c.group, n0,
                min_u32(kTileN, c.n - n0), c.y + size_t{m0} * c.n, scratch);
}

// Rows [first, last) of expert e's matrix on `cols` columns from n0, in tile-height chunks.
template <Family kFamily>
void expert_rows(const GroupedQCall& g, uint32_t e, uint32_t first, uint32_t last, uint32_t n0, uint32_t cols,
                 unsigned char* scratch) {
  constexpr FamilyTraits f = traits(kFamily);
  const Weights w = matrix_at(f, g.w, e, g.n, g.k, g.group);
  for (uint32_t r = first; r < last; r += kTileM)
    tile<kFamily>(static_cast<const uint8_t*>(g.x) + r * act_row_bytes(f, g.k),
                  g.xscale ? g.xscale + r * act_row_scales(f, g.k) : nullptr,
                  min_u32(kTileM, last - r), w, g.n, g.k, g.group, n0, min_u32(cols, g.n - n0),
                  g.y + size_t{r} * g.n, scratch);
}

template <Family kFamily>
void grouped(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  const GroupedQCall g = grouped_qcall(args, traits(kFamily));
  const uint32_t n0 = bx * kTileN;
  if (n0 >= g.n || by >= g.experts) return;
  expert_rows<kFamily>(g, by, static_cast<uint32_t>(g.offsets[by]), static_cast<uint32_t>(g.offsets[by + 1]), n0,
                       kTileN, scratch);
}

// The canonical layout is the baseline's own: block (bx, by) copies rows [64 bx, 64 bx + 64) of
// matrix `by`, every tensor, unchanged.
template <Family kFamily>
void repack(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char*) {
  constexpr FamilyTraits f = traits(kFamily);
  const QRepackCall c = qrepack_call(args, f);
  const uint32_t r0 = bx * kRepackRows;
  if (r0 >= c.n || by >= c.count) return;
  const uint32_t rows = min_u32(kRepackRows, c.n - r0);
  const MatrixBytes matrix = matrix_bytes(f, c.n, c.k, c.group), part = matrix_bytes(f, rows, c.k, c.group);
  const MatrixBytes at{by * matrix.codes + matrix_bytes(f, r0, c.k, c.group).codes,
                       by * matrix.scales + matrix_bytes(f, r0, c.k, c.group).scales,
                       by * matrix.zeros + matrix_bytes(f, r0, c.k, c.group).zeros};
  std::memcpy(c.codes_out + at.codes, c.in.codes + at.codes, part.codes);
  if (f.scale_bytes) std::memcpy(c.scales_out + at.scales, c.in.scales + at.scales, part.scales);
  if (f.zeros) std::memcpy(c.zeros_out + at.zeros, c.in.zeros + at.zeros, part.zeros);
}

}  // namespace

void w4a16_zp_gemv(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemv<Family::w4a16_zp>(a, x, y, s); }
void w4a16_zp_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemm<Family::w4a16_zp>(a, x, y, s); }
void w4a16_zp_grouped_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) {
  grouped<Family::w4a16_zp>(a, x, y, s);
}
void w8a16_gemv(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemv<Family::w8a16>(a, x, y, s); }
void w8a16_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemm<Family::w8a16>(a, x, y, s); }
void w8a16_grouped_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) {
  grouped<Family::w8a16>(a, x, y, s);
}
void fp8_gemv(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemv<Family::fp8>(a, x, y, s); }
void fp8_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemm<Family::fp8>(a, x, y, s); }
void fp8_grouped_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { grouped<Family::fp8>(a, x, y, s); }
void w4a8_gemv(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemv<Family::w4a8>(a, x, y, s); }
void w4a8_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemm<Family::w4a8>(a, x, y, s); }
void w4a8_grouped_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { grouped<Family::w4a8>(a, x, y, s); }
void w8a8_gemv(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemv<Family::w8a8>(a, x, y, s); }
void w8a8_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemm<Family::w8a8>(a, x, y, s); }
void w8a8_grouped_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { grouped<Family::w8a8>(a, x, y, s); }
void w4zp_repack(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { repack<Family::w4a16_zp>(a, x, y, s); }
void w8zp_repack(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { repack<Family::w8a16>(a, x, y, s); }
void fp8_repack(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { repack<Family::fp8>(a, x, y, s); }
void bf16_gemv(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemv<Family::bf16>(a, x, y, s); }
void bf16_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemm<Family::bf16>(a, x, y, s); }
void bf16_grouped_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { grouped<Family::bf16>(a, x, y, s); }
void bf16_repack(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { repack<Family::bf16>(a, x, y, s); }
void f16_gemv(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemv<Family::f16>(a, x, y, s); }
void f16_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemm<Family::f16>(a, x, y, s); }
void f16_grouped_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { grouped<Family::f16>(a, x, y, s); }
void f16_repack(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { repack<Family::f16>(a, x, y, s); }
void w4afp8_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemm<Family::w4afp8>(a, x, y, s); }
void w4afp8_grouped_gemm(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { grouped<Family::w4afp8>(a, x, y, s); }
void fp8_gemv_a8(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemv<Family::fp8_a8>(a, x, y, s); }
void fp8_gemm_a8(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemm<Family::fp8_a8>(a, x, y, s); }
void fp8_gemv_a8_group128(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) {
  gemv<Family::fp8_a8_group128>(a, x, y, s);
}
void fp8_grouped_gemm_a8(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { grouped<Family::fp8_a8>(a, x, y, s); }
void fp8_gemm_a8_group128(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) { gemm<Family::fp8_a8_group128>(a, x, y, s); }
void fp8_grouped_gemm_a8_group128(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) {
  grouped<Family::fp8_a8_group128>(a, x, y, s);
}

// Block (bx, by): 64 columns of every row of expert active[1 + by] (by < active[0]).
void fp8_grouped_gemv(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  const ActiveCall a = active_call(args);
  const uint32_t n0 = bx * kGemvRows;
  if (n0 >= a.g.n || a.active[0] < 0 || by >= static_cast<uint32_t>(a.active[0])) return;
  const auto e = static_cast<uint32_t>(a.active[1 + by]);
  expert_rows<Family::fp8>(a.g, e, static_cast<uint32_t>(a.g.offsets[e]), static_cast<uint32_t>(a.g.offsets[e + 1]),
                           n0, kGemvRows, scratch);
}

namespace {

// Block (bx, 0): row bx in groups of `kWidth` columns (0: the whole row), one scale each.
template <Codes kCodes, Arithmetic kArith, uint32_t kWidth>
void quantize_rows(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  using Rule = QuantRule<kCodes, kArith>;
  const uint32_t k = arg_u32(args, 4), width = kWidth ? kWidth : k;
  const uint16_t* x = arg_ptr<const uint16_t>(args, 0) + size_t{bx} * k;
  uint8_t* xq = arg_ptr<uint8_t>(args, 1) + size_t{bx} * k;
  float* xscale = arg_ptr<float>(args, 2) + size_t{bx} * (k / width);
  for (uint32_t g = 0; g < k / width; ++g) {
    const uint16_t* xg = x + size_t{g} * width;
    float peak = 0.0f;
    for (uint32_t t = 0; t < width; ++t) peak = std::fmax(peak, std::fabs(bf16_to_f32(xg[t])));
    const float scale = Rule::scale(peak);
    xscale[g] = scale;
    for (uint32_t t = 0; t < width; ++t) xq[size_t{g} * width + t] = Rule::code(bf16_to_f32(xg[t]), scale);
  }
}

// Block (bx, 0): grouped row bx, quantized with its group's stored scale (bf16 arithmetic).
template <Codes kCodes>
void quantize_static(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  using Rule = QuantRule<kCodes, Arithmetic::bf16>;
  const float* scales = arg_ptr<const float>(args, 1);
  const int32_t* offsets = arg_ptr<const int32_t>(args, 2);
  const uint32_t k = arg_u32(args, 5), groups = arg_u32(args, 6);
  if (bx < static_cast<uint32_t>(offsets[0])) return;  // before the first group: in none
  uint32_t g = 0;  // the group holding row bx: offsets are non-decreasing
  while (g + 1 < groups && static_cast<uint32_t>(offsets[g + 1]) <= bx) ++g;
  const float scale = scales[g];
  const uint16_t* x = arg_ptr<const uint16_t>(args, 0) + size_t{bx} * k;
  uint8_t* xq = arg_ptr<uint8_t>(args, 3) + size_t{bx} * k;
  arg_ptr<float>(args, 4)[bx] = scale;
  for (uint32_t t = 0; t < k; ++t) xq[t] = Rule::code(bf16_to_f32(x[t]), scale);
}

}  // namespace

void quantize_int8_static_bf16(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) {
  quantize_static<Codes::w8>(a, x, y, s);
}
void quantize_fp8_static_bf16(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) {
  quantize_static<Codes::fp8>(a, x, y, s);
}
void quantize_int8(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) {
  quantize_rows<Codes::w8, Arithmetic::f32, 0>(a, x, y, s);
}
void quantize_int8_bf16(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) {
  quantize_rows<Codes::w8, Arithmetic::bf16, 0>(a, x, y, s);
}
void quantize_fp8(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) {
  quantize_rows<Codes::fp8, Arithmetic::f32, 0>(a, x, y, s);
}
void quantize_fp8_bf16(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) {
  quantize_rows<Codes::fp8, Arithmetic::bf16, 0>(a, x, y, s);
}
void quantize_fp8_group128(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) {
  quantize_rows<Codes::fp8, Arithmetic::f32, 128>(a, x, y, s);
}
void quantize_fp8_group128_bf16(const KernelArgs& a, uint32_t x, uint32_t y, unsigned char* s) {
  quantize_rows<Codes::fp8, Arithmetic::bf16, 128>(a, x, y, s);
}

// Block (bx, 0): grouped row bx, its columns in the order of its group's permutation.
void gather_k(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const uint16_t* x = arg_ptr<const uint16_t>(args, 0);
  const int32_t* perm = arg_ptr<const int32_t>(args, 1);
  const int32_t* offsets = arg_ptr<const int32_t>(args, 2);
  uint16_t* out = arg_ptr<uint16_t>(args, 3);
  const uint32_t k = arg_u32(args, 4), groups = arg_u32(args, 5);
  if (bx < static_cast<uint32_t>(offsets[0])) return;  // before the first group: in none
  uint32_t g = 0;  // the group holding row bx: offsets are non-decreasing
  while (g + 1 < groups && static_cast<uint32_t>(offsets[g + 1]) <= bx) ++g;
  const int32_t* p = perm + size_t{g} * k;
  const uint16_t* row = x + size_t{bx} * k;
  uint16_t* dst = out + size_t{bx} * k;
  for (uint32_t j = 0; j < k; ++j) dst[j] = row[p[j]];
}

}  // namespace metrale::cpu::baseline
