// SPDX-License-Identifier: MIT OR Apache-2.0
// Module `act` (docs/kernels.md): out[r][j] = act(gate[r][j]) * up[r][j] for gate_up bf16
// [M][2I] (gate in [0, I), up in [I, 2I)), computed in f32, stored bf16.
// Grid (ceil(i/1024), m); any 1-D block size (256 by contract): a block covers 1024 columns.
#include "metrale_common.cuh"

namespace {

constexpr unsigned kColumnsPerBlock = 1024;

struct Silu {
  __device__ float operator()(float g) const { return g / (1.f + expf(-g)); }
};

struct GeluTanh {
  __device__ float operator()(float g) const {
    const float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * g * (1.f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
  }
};

template <class Act>
__device__ void act_mul(const __nv_bfloat16* __restrict__ gate_up, __nv_bfloat16* __restrict__ out, unsigned m,
                        unsigned i, Act act) {
  const unsigned row = blockIdx.y;
  if (row >= m) return;
  const __nv_bfloat16* gate = gate_up + static_cast<size_t>(row) * 2 * i;
  const __nv_bfloat16* up = gate + i;
  __nv_bfloat16* dst = out + static_cast<size_t>(row) * i;
  const unsigned begin = blockIdx.x * kColumnsPerBlock;
  const unsigned end = min(begin + kColumnsPerBlock, i);
  for (unsigned j = begin + threadIdx.x; j < end; j += blockDim.x) {
    dst[j] = metrale::to_bf16(act(metrale::to_f32(gate[j])) * metrale::to_f32(up[j]));
  }
}

}  // namespace

extern "C" __global__ void silu_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, unsigned m, unsigned i) {
  act_mul(gate_up, out, m, i, Silu{});
}

extern "C" __global__ void gelu_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, unsigned m, unsigned i) {
  act_mul(gate_up, out, m, i, GeluTanh{});
}
