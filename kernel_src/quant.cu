// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `quant` (docs/kernels.md): activations quantized per row for the int8 and FP8
// activation families, and the act-order gather of K. Grids: quantize (m, 1), block 256 (any
// 1-D block); quantize_*_static_bf16 and gather_k (T, 1), block 128 (any 1-D block).
#include "metrale_common.cuh"
#include "metrale_ptx.cuh"

namespace {

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// How a quantizer computes (docs/kernels.md, "Activation quantization"): f32 (a / 127 or a /
// 448 and x / s in f32, int8 codes -127..127), or torch's bf16 arithmetic as compressed-tensors
// quantizes (s = bf16(a / 127.5) or bf16(a / 448), at least 2^-23; x / s rounded to bf16; int8
// codes -128..127).
enum class Arith { f32, bf16 };

__device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Two clamped quotients as two codes (low byte first).
struct Int8Codes {
  static constexpr bool kInt = true;
  __device__ unsigned operator()(float lo, float hi) const {
    return (static_cast<unsigned>(__float2int_rn(lo)) & 0xffu) | ((static_cast<unsigned>(__float2int_rn(hi)) & 0xffu) << 8);
  }
};

struct E4m3Codes {
  static constexpr bool kInt = false;
  __device__ unsigned operator()(float lo, float hi) const {
#if defined(METRALE_HAS_FP8)
    return metrale::cvt_e4m3x2(hi, lo);
#else
    __trap();  // the manifest gates the E4M3 quantizers to sm_89+
    return 0;
#endif
  }
};

template <class Codes, Arith A>
struct Rule {
  static constexpr float kDivisor = Codes::kInt ? (A == Arith::f32 ? 127.f : 127.5f) : 448.f;
  static constexpr float kLow = Codes::kInt ? (A == Arith::f32 ? -127.f : -128.f) : -448.f;
  static constexpr float kHigh = Codes::kInt ? 127.f : 448.f;
  __device__ static float scale(float a) {
    const float s = a / kDivisor;
    return A == Arith::f32 ? s : fmaxf(bf16_round(s), 0x1p-23f);
  }
  // The clamped quotient (s = 0, f32 only: 0). fminf/fmaxf would drop a NaN quotient; the codes
  // of a row holding NaN or infinities are unspecified.
  __device__ static float quotient(float x, float s) {
    if (s == 0.f) return 0.f;
    float v = x / s;
    if (A == Arith::bf16) v = bf16_round(v);
    return fminf(fmaxf(v, kLow), kHigh);
  }
  __device__ static unsigned pair(float lo, float hi, float s) { return Codes{}(quotient(lo, s), quotient(hi, s)); }
};

// One scale per row: block per row, a = max |x| over the block.
template <class Codes, Arith A>
__device__ void quantize_row(const __nv_bfloat16* x, unsigned char* xq, float* xscale, unsigned m, unsigned k) {
  __shared__ float scratch[1024];
  const unsigned row = blockIdx.x;
  if (row >= m) return;
  const __nv_bfloat16* xr = x + static_cast<size_t>(row) * k;
  float local = 0.f;
  for (unsigned j = threadIdx.x; j < k; j += blockDim.x) local = fmaxf(local, fabsf(metrale::to_f32(xr[j])));
  const float a = metrale::block_reduce(local, scratch, MaxOp{});
  const float sr = Rule<Codes, A>::scale(a);
  if (threadIdx.x == 0) xscale[row] = sr;
  unsigned short* out = reinterpret_cast<unsigned short*>(xq + static_cast<size_t>(row) * k);
  for (unsigned j = threadIdx.x; j < k / 2; j += blockDim.x) {
    out[j] = static_cast<unsigned short>(Rule<Codes, A>::pair(metrale::to_f32(xr[2 * j]), metrale::to_f32(xr[2 * j + 1]), sr));
  }
}

// One scale per 128 columns (xscale [m][k/128]): block per row, a warp per group, four values
// per lane.
template <class Codes, Arith A>
__device__ void quantize_groups(const __nv_bfloat16* x, unsigned char* xq, float* xscale, unsigned m, unsigned k) {
  const unsigned row = blockIdx.x;
  if (row >= m) return;
  const unsigned lane = threadIdx.x & 31u, warps = blockDim.x >> 5;
  for (unsigned g = threadIdx.x >> 5; g < k / 128; g += warps) {
    const size_t at = static_cast<size_t>(row) * k + g * 128 + 4 * lane;
    const uint2 raw = *reinterpret_cast<const uint2*>(x + at);
    const float v[4] = {metrale::bf16_lo(raw.x), metrale::bf16_hi(raw.x), metrale::bf16_lo(raw.y), metrale::bf16_hi(raw.y)};
    float a = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    for (unsigned offset = 16; offset > 0; offset /= 2) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, offset));
    const float s = Rule<Codes, A>::scale(a);
    if (lane == 0) xscale[static_cast<size_t>(row) * (k / 128) + g] = s;
    const unsigned lo = Rule<Codes, A>::pair(v[0], v[1], s), hi = Rule<Codes, A>::pair(v[2], v[3], s);
    *reinterpret_cast<unsigned*>(xq + at) = lo | (hi << 16);
  }
}

}  // namespace

extern "C" __global__ void quantize_int8(const __nv_bfloat16* x, unsigned char* xq, float* xscale, unsigned m,
                                         unsigned k) {
  quantize_row<Int8Codes, Arith::f32>(x, xq, xscale, m, k);
}

extern "C" __global__ void quantize_int8_bf16(const __nv_bfloat16* x, unsigned char* xq, float* xscale, unsigned m,
                                              unsigned k) {
  quantize_row<Int8Codes, Arith::bf16>(x, xq, xscale, m, k);
}

// E4M3 codes need the FP8 conversion of sm_89+ (the manifest gates these).
extern "C" __global__ void quantize_fp8(const __nv_bfloat16* x, unsigned char* xq, float* xscale, unsigned m,
                                        unsigned k) {
  quantize_row<E4m3Codes, Arith::f32>(x, xq, xscale, m, k);
}

extern "C" __global__ void quantize_fp8_bf16(const __nv_bfloat16* x, unsigned char* xq, float* xscale, unsigned m,
                                             unsigned k) {
  quantize_row<E4m3Codes, Arith::bf16>(x, xq, xscale, m, k);
}

extern "C" __global__ void quantize_fp8_group128(const __nv_bfloat16* x, unsigned char* xq, float* xscale, unsigned m,
                                                 unsigned k) {
  quantize_groups<E4m3Codes, Arith::f32>(x, xq, xscale, m, k);
}

extern "C" __global__ void quantize_fp8_group128_bf16(const __nv_bfloat16* x, unsigned char* xq, float* xscale,
                                                      unsigned m, unsigned k) {
  quantize_groups<E4m3Codes, Arith::bf16>(x, xq, xscale, m, k);
}

namespace {

// Rows grouped by offsets (i32 [groups+1], as gather_k's): the group holding `row`, or `groups`
// when it is before the first group or past the last.
__device__ unsigned group_of_row(const int* offsets, unsigned groups, int row) {
  if (groups == 0 || row < offsets[0] || row >= offsets[groups]) return groups;
  unsigned lo = 0;  // the last group whose rows start at or before `row` (empty groups skipped)
  unsigned hi = groups;
  while (hi - lo > 1) {
    const unsigned mid = (lo + hi) / 2;
    if (offsets[mid] <= row) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Static scales: grouped row blockIdx.x quantized with its group's stored scale, bf16 arithmetic.
template <class Codes>
__device__ void quantize_static(const __nv_bfloat16* x, const float* scales, const int* offsets, unsigned char* xq,
                                float* xscale, unsigned k, unsigned groups) {
  const int row = static_cast<int>(blockIdx.x);
  const unsigned g = group_of_row(offsets, groups, row);
  if (g == groups) return;
  const float s = scales[g];
  if (threadIdx.x == 0) xscale[row] = s;
  const __nv_bfloat16* xr = x + static_cast<size_t>(row) * k;
  unsigned short* out = reinterpret_cast<unsigned short*>(xq + static_cast<size_t>(row) * k);
  for (unsigned j = threadIdx.x; j < k / 2; j += blockDim.x) {
    out[j] = static_cast<unsigned short>(Rule<Codes, Arith::bf16>::pair(metrale::to_f32(xr[2 * j]), metrale::to_f32(xr[2 * j + 1]), s));
  }
}

}  // namespace

// Grid (offsets[groups], 1), any 1-D block.
extern "C" __global__ void quantize_int8_static_bf16(const __nv_bfloat16* x, const float* scales, const int* offsets,
                                                     unsigned char* xq, float* xscale, unsigned k, unsigned groups) {
  quantize_static<Int8Codes>(x, scales, offsets, xq, xscale, k, groups);
}

extern "C" __global__ void quantize_fp8_static_bf16(const __nv_bfloat16* x, const float* scales, const int* offsets,
                                                    unsigned char* xq, float* xscale, unsigned k, unsigned groups) {
  quantize_static<E4m3Codes>(x, scales, offsets, xq, xscale, k, groups);
}

// out[r][j] = x[r][perm[g·K + j]] for row r of group g (rows grouped by offsets i32 [groups+1]).
extern "C" __global__ void gather_k(const __nv_bfloat16* x, const int* perm, const int* offsets, __nv_bfloat16* out,
                                    unsigned k, unsigned groups) {
  const int row = static_cast<int>(blockIdx.x);
  const unsigned lo = group_of_row(offsets, groups, row);
  if (lo == groups) return;
  const int* p = perm + static_cast<size_t>(lo) * k;
  const __nv_bfloat16* xr = x + static_cast<size_t>(row) * k;
  __nv_bfloat16* outr = out + static_cast<size_t>(row) * k;
  for (unsigned j = threadIdx.x; j < k; j += blockDim.x) outr[j] = xr[p[j]];
}
