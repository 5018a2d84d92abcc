// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `quant` (docs/kernels.md): activations quantized per row for the int8 and FP8
// activation families, and the act-order gather of K. Grids: quantize (m, 1), block 256 (any
// 1-D block); gather_k (T, 1), block 128 (any 1-D block).
#include "metrale_common.cuh"
#include "metrale_ptx.cuh"

namespace {

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Two values already divided by the row scale, as two int8 codes (low byte first).
struct Int8Codes {
  static constexpr float kMax = 127.f;
  __device__ unsigned operator()(float lo, float hi) const {
    const int a = max(-127, min(127, __float2int_rn(lo)));
    const int b = max(-127, min(127, __float2int_rn(hi)));
    return (static_cast<unsigned>(a) & 0xffu) | ((static_cast<unsigned>(b) & 0xffu) << 8);
  }
};

struct E4m3Codes {
  static constexpr float kMax = 448.f;
  __device__ unsigned operator()(float lo, float hi) const {
#if defined(METRALE_HAS_FP8)
    return metrale::cvt_e4m3x2(hi, lo);
#else
    __trap();  // the manifest gates quantize_fp8 to sm_89+
    return 0;
#endif
  }
};

// a = max |x| of the row, sr = a / kMax, codes of x / sr (all f32, rounded to nearest even).
template <class Codes>
__device__ void quantize_row(const __nv_bfloat16* x, unsigned char* xq, float* xscale, unsigned m, unsigned k) {
  __shared__ float scratch[1024];
  const unsigned row = blockIdx.x;
  if (row >= m) return;
  const __nv_bfloat16* xr = x + static_cast<size_t>(row) * k;
  float local = 0.f;
  for (unsigned j = threadIdx.x; j < k; j += blockDim.x) local = fmaxf(local, fabsf(metrale::to_f32(xr[j])));
  const float a = metrale::block_reduce(local, scratch, MaxOp{});
  const float sr = a / Codes::kMax;
  if (threadIdx.x == 0) xscale[row] = sr;
  unsigned short* out = reinterpret_cast<unsigned short*>(xq + static_cast<size_t>(row) * k);
  for (unsigned j = threadIdx.x; j < k / 2; j += blockDim.x) {
    const float lo = metrale::to_f32(xr[2 * j]);
    const float hi = metrale::to_f32(xr[2 * j + 1]);
    out[j] = sr == 0.f ? 0 : static_cast<unsigned short>(Codes{}(lo / sr, hi / sr));
  }
}

}  // namespace

extern "C" __global__ void quantize_int8(const __nv_bfloat16* x, unsigned char* xq, float* xscale, unsigned m,
                                         unsigned k) {
  quantize_row<Int8Codes>(x, xq, xscale, m, k);
}

// E4M3 codes need the FP8 conversion of sm_89+ (the manifest gates it).
extern "C" __global__ void quantize_fp8(const __nv_bfloat16* x, unsigned char* xq, float* xscale, unsigned m,
                                        unsigned k) {
  quantize_row<E4m3Codes>(x, xq, xscale, m, k);
}

// out[r][j] = x[r][perm[g·K + j]] for row r of group g (rows grouped by offsets i32 [groups+1]).
extern "C" __global__ void gather_k(const __nv_bfloat16* x, const int* perm, const int* offsets, __nv_bfloat16* out,
                                    unsigned k, unsigned groups) {
  const int row = static_cast<int>(blockIdx.x);
  if (groups == 0 || row >= offsets[groups]) return;
  unsigned lo = 0;  // the last group whose rows start at or before `row` (empty groups skipped)
  unsigned hi = groups;
  while (hi - lo > 1) {
    const unsigned mid = (lo + hi) / 2;
    if (offsets[mid] <= row) lo = mid;
    else hi = mid;
  }
  const int* p = perm + static_cast<size_t>(lo) * k;
  const __nv_bfloat16* xr = x + static_cast<size_t>(row) * k;
  __nv_bfloat16* outr = out + static_cast<size_t>(row) * k;
  for (unsigned j = threadIdx.x; j < k; j += blockDim.x) outr[j] = xr[p[j]];
}
